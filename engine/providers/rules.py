"""``RuleProvider``: an offline, deterministic stand-in for a model, for ``turnflow dev`` and the
examples. It is a demo aid, not a model: it matches words, it does not understand them.

It never reads the prompt prose; it reads ``ModelRequest.meta`` (documented in ``base.py``) and
answers with an envelope built property by property from ``request.json_schema``, so every
property the schema names is present, ``null`` when the rules know nothing. It never calls tools.

- understand: a flow scores by phrase overlap with the message (100 for a whole phrase, less
  for some of its words); a mention is present when one of its phrases is; a branch reads the
  message as yes or no; fields are extracted with one pattern per type.
- speak: the message asks the first field still pending (its ``ask``, turned into a question
  when it is an "Ask ..." / "Pergunte ..." / "Pregunta ..." instruction), first saying which
  choices it just heard ("Noted: saturday."), else thanks the customer when the message answered
  everything, else phrases the step prompt, else a polite default; pending fields are extracted
  from the customer's message. The first reply to a burst that opens with a greeting greets
  back ("Hi Lee!") when nothing else was said this turn. Stock replies follow the language
  (English, Portuguese, Spanish) that the message, prompt and asks are written in.
- a burst (several messages answered in one turn, ``meta["messages"]``) is read message by
  message, as a model reads them: each value, yes or no is read from one message, and where
  several messages give one the latest wins ("saturday" then "actually friday" is friday).
- compact: a short summary naming how many entries it covers and what the customer said.
- skills (the lifecycle's skill classifier): the skills whose description shares words with the
  message, best first, at most two, and the message's language.
- vision: a fixed note that it cannot see images.

Same request, same response: no clock, no randomness, no state between calls.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date, datetime
from typing import Any

from engine.providers.base import ModelRequest, ModelResponse, ProviderHooks
from engine.providers.http import observed

PROVIDER_NAME = "rules"
POLITE_DEFAULT = "How can I help you?"
VISION_NOTE = "The customer sent images; the offline provider cannot see them."
THANKS = "Thank you, got it."
_STOCK_REPLIES = {
    "en": (THANKS, POLITE_DEFAULT),
    "pt": ("Perfeito, anotado.", "Como posso ajudar?"),
    "es": ("Perfecto, anotado.", "¿En qué puedo ayudarte?"),
}
# "Noted: {values}." before the next question; "Hi{ name}!" back to a first greeting.
_NOTED = {"en": "Noted: {}.", "pt": "Anotado: {}.", "es": "Anotado: {}."}
_HELLO = {"en": "Hi{}!", "pt": "Olá{}!", "es": "¡Hola{}!"}
_GREETINGS = frozenset("hi hello hey hiya howdy oi ola hola buenas bom dia".split())
_LANGUAGE_MARKERS = {
    "en": frozenset("the an of to and is you your ask hi hello thanks please i want my "
                    "what which could would".split()),
    "pt": frozenset("o os as do da dos das nao voce seu sua com um uma pergunte peca oi ola "
                    "obrigado obrigada quero sou eu tudo bem qual".split()),
    "es": frozenset("el los las del usted con y pregunta preguntale pide hola gracias quiero "
                    "soy yo cual".split()),
}

_STOPWORDS = frozenset(
    "a an the to of for in on at and or is are be i my me you your it this that do does "
    "o os as um uma uns umas de do da dos das em no na nos nas e eu meu minha para por com "
    "el la los las un una y en mi con es del al lo".split()
)
_YES = frozenset(
    "yes yeah yep yup sure ok okay correct right confirm confirmed "
    "sim claro certo isso exato exatamente pode confirmo beleza "
    "si vale dale perfecto correcto afirmativo".split()
)
# "no" is also Portuguese for "in the", so it reads as a refusal only as the first word.
_NO = frozenset("nope nah not never nao nunca negativo nem jamais tampoco".split())
_NO_FIRST_WORD = frozenset({"no"})

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_ISO_DATETIME = re.compile(
    r"\b(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)(Z|[+-]\d{2}:?\d{2})?"
)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_DAY_FIRST_DATE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")
_NUMBER = re.compile(r"(?<![\w.,])[-+]?\d+(?:[.,]\d+)*")
_NAME_INTRO = re.compile(
    r"\b(?:my name is|i'?m called|call me|me llamo|mi nombre es|meu nome (?:é|e)|me chamo|"
    r"chamo-me)[ \t]+([^\W\d_][\w'-]*(?:[ \t]+[^\W\d_][\w'-]*){0,2})",
    re.IGNORECASE,
)
# Weaker lead-ins, trusted only in a reply to the question that asked for the name.
_ANSWER_INTRO = re.compile(
    r"^(?:i'?m|i am|it'?s|this is|eu sou|sou|aqui (?:é|e)|soy|es)\s+(?:(?:o|a|el|la)\s+)?(.+)$",
    re.IGNORECASE,
)
_NAME_FIELD = re.compile(r"name|nome|nombre", re.IGNORECASE)
# Words that make a reply something other than a name.
_NOT_NAMES = _GREETINGS | frozenset(
    "i my me you your it is am are be would will can could should the an to for and or with "
    "need want like please thanks thank best good fine ok what which when how why "
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow morning "
    "afternoon evening week book booking repair fix bike".split()
)


def normalize(text: str) -> str:
    """Lower case without accents: "Não" and "nao" are the same word here."""
    if text.isascii():  # NFKD leaves ASCII as it is, and no ASCII character is combining
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", normalize(text))


def _same_word(a: str, b: str) -> bool:
    # A shared stem of four letters or more counts: "compra"/"comprar", "repair"/"repairs".
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    return len(short) >= 4 and long_.startswith(short)


def _contains_sequence(haystack: list[str], needle: list[str]) -> bool:
    span = len(needle)
    return any(
        all(_same_word(haystack[i + j], needle[j]) for j in range(span))
        for i in range(len(haystack) - span + 1)
    )


def phrase_score(phrase: str, message: str) -> int:
    """0-100: 100 when the whole phrase is in the message, else up to 90 by shared words."""
    phrase_words, message_words = words(phrase), words(message)
    if not phrase_words or not message_words:
        return 0
    if _contains_sequence(message_words, phrase_words):
        return 100
    content = [w for w in phrase_words if w not in _STOPWORDS] or phrase_words
    hits = sum(1 for w in content if any(_same_word(w, m) for m in message_words))
    return round(90 * hits / len(content))


def flow_score(phrases: list[str], message: str) -> int:
    """The best phrase score of a flow."""
    return max((phrase_score(p, message) for p in phrases), default=0)


def mentioned(phrases: list[str], message: str) -> bool:
    return any(phrase_score(p, message) == 100 for p in phrases)


def read_yes_no(message: str) -> bool | None:
    """True for a yes, False for a no, None when the message says neither.

    The first yes-or-no word decides ("yes, but not today" is a yes).
    """
    for index, word in enumerate(words(message)):
        if word in _YES:
            return True
        if word in _NO or (index == 0 and word in _NO_FIRST_WORD):
            return False
    return None


def message_parts(meta: dict[str, Any]) -> list[str]:
    """The customer's messages of the turn, oldest first: ``meta["messages"]`` (a burst's,
    one by one), else the one ``message``."""
    parts = meta.get("messages")
    if isinstance(parts, list) and parts and all(isinstance(p, str) for p in parts):
        return list(parts)
    message = meta.get("message")
    return [str(message)] if message else []


def latest(parts: list[str], read: Any) -> Any:
    """What ``read`` finds in the latest message that gives anything (None when none does):
    in a burst, a later message corrects an earlier one."""
    for part in reversed(parts):
        value = read(part)
        if value is not None:
            return value
    return None


def _listed(spec: dict[str, Any]) -> bool:
    """A field whose value is one of a list or not free text (a day, a number, a date)."""
    return bool(spec.get("enum")) or spec.get("type", "string") != "string"


def latest_value(parts: list[str], spec: dict[str, Any], name: str) -> Any:
    """A field's value from the latest message that gives one."""
    return latest(parts, lambda part: extract_value(spec, part, name=name))


def greets(parts: list[str]) -> bool:
    """Whether one of the messages opens with a greeting ("hi", "hello there", "olá")."""
    for part in parts:
        found = words(part)
        if found and (found[0] in _GREETINGS or " ".join(found[:2]) in _GREETINGS):
            return True
    return False


def _parse_number(token: str) -> float | None:
    sign = -1.0 if token.startswith("-") else 1.0
    token = token.lstrip("+-")
    if "." in token and "," in token:
        decimal = "." if token.rfind(".") > token.rfind(",") else ","
        thousands = "," if decimal == "." else "."
        token = token.replace(thousands, "").replace(decimal, ".")
    elif "." in token or "," in token:
        sep = "." if "." in token else ","
        groups = token.split(sep)
        # One separator with three digits after it ("1.500", "1,500") groups thousands;
        # anything else ("12,5", "3.75") is a decimal mark.
        if len(groups) > 2 or len(groups[-1]) == 3:
            token = "".join(groups)
        else:
            token = ".".join(groups)
    try:
        return sign * float(token)
    except ValueError:
        return None


def _without_non_numbers(text: str) -> str:
    # Dates, times and emails hold digits that are not the quantity the customer meant.
    for pattern in (_EMAIL, _ISO_DATETIME, _ISO_DATE, _DAY_FIRST_DATE):
        text = pattern.sub(" ", text)
    return re.sub(r"\b\d{1,2}:\d{2}\b", " ", text)


def extract_numbers(text: str) -> list[float]:
    found = (_parse_number(m.group()) for m in _NUMBER.finditer(_without_non_numbers(text)))
    return [n for n in found if n is not None]


def _as_json_number(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def extract_date(text: str) -> str | None:
    """An ISO date (``YYYY-MM-DD``, or day-first ``DD/MM/YYYY``) as ``YYYY-MM-DD``."""
    candidates: list[tuple[int, int, int, int]] = []
    for match in _ISO_DATE.finditer(text):
        y, m, d = (int(g) for g in match.groups())
        candidates.append((match.start(), y, m, d))
    for match in _DAY_FIRST_DATE.finditer(text):
        d, m, y = (int(g) for g in match.groups())
        candidates.append((match.start(), y, m, d))
    for _, y, m, d in sorted(candidates):
        try:
            return date(y, m, d).isoformat()
        except ValueError:
            continue
    return None


def extract_datetime(text: str) -> str | None:
    """An ISO date-time, with ``T`` or a space, as an ISO string (``Z`` kept as ``+00:00``)."""
    for match in _ISO_DATETIME.finditer(text):
        day, clock, zone = match.groups()
        raw = f"{day}T{clock}{'+00:00' if zone == 'Z' else (zone or '')}"
        if zone and zone != "Z" and ":" not in zone:
            raw = f"{day}T{clock}{zone[:3]}:{zone[3:]}"
        try:
            return datetime.fromisoformat(raw).isoformat()
        except ValueError:
            continue
    return None


def extract_enum(members: list[Any], text: str) -> Any:
    """The member named earliest in the text (the longer one on a tie), or None."""
    message_words = words(text)
    numbers = extract_numbers(text)
    best: tuple[int, int] | None = None
    chosen: Any = None
    for member in members:
        if isinstance(member, bool) or member is None:
            continue
        if isinstance(member, int | float):
            if float(member) in numbers:
                position = (numbers.index(float(member)), 0)
                if best is None or position < best:
                    best, chosen = position, member
            continue
        member_words = words(str(member))
        if not member_words:
            continue
        for i in range(len(message_words) - len(member_words) + 1):
            window = message_words[i:i + len(member_words)]
            if all(_same_word(a, b) for a, b in zip(window, member_words, strict=True)):
                position = (i, -len(member_words))
                if best is None or position < best:
                    best, chosen = position, member
                break
    return chosen


def extract_value(spec: dict[str, Any], text: str, *, name: str = "") -> Any:
    """The value of one field read from ``text`` by its spec's type, or None.

    A plain string field (no ``enum``) is found only when the field is a name and the text
    introduces one ("my name is Ana", "me chamo Ana").
    """
    if not text:
        return None
    kind = spec.get("type", "string")
    members = spec.get("enum")
    if isinstance(members, list) and members:
        return extract_enum(members, text)
    if kind == "email":
        match = _EMAIL.search(text)
        return match.group() if match else None
    if kind == "boolean":
        return read_yes_no(text)
    if kind == "number":
        numbers = extract_numbers(text)
        return _as_json_number(numbers[0]) if numbers else None
    if kind == "integer":
        integral = [int(n) for n in extract_numbers(text) if n.is_integer()]
        return integral[0] if integral else None
    if kind == "date":
        return extract_date(text)
    if kind == "datetime":
        return extract_datetime(text)
    if _NAME_FIELD.search(name):
        match = _NAME_INTRO.search(text)
        return match.group(1) if match else None
    return None


def direct_answer(spec: dict[str, Any], text: str, *, name: str = "") -> Any:
    """The whole message as the answer to a plain string question it was just asked.

    Only short replies count (up to six words), and never a bare yes or no. A name is at most
    three words, none of them an everyday word ("saturday would be best" is not a name).
    """
    if spec.get("type", "string") != "string" or spec.get("enum"):
        return None
    reply = text.strip().strip(".!?;, ")
    if not reply or len(reply.split()) > 6 or read_yes_no(reply) is not None:
        return None
    intro = _NAME_INTRO.search(reply) or _ANSWER_INTRO.match(reply)
    answer = intro.group(1) if intro else reply
    if _NAME_FIELD.search(name):
        said = words(answer)
        if not said or len(answer.split()) > 3 or any(w in _NOT_NAMES for w in said):
            return None
    return answer


def guess_language(texts: list[str]) -> str:
    """"en", "pt" or "es", by counting marker words; English when nothing tips it."""
    counts = dict.fromkeys(_LANGUAGE_MARKERS, 0)
    for text in texts:
        for word in words(text):
            for language, markers in _LANGUAGE_MARKERS.items():
                counts[language] += word in markers
    best = max(counts.values())
    if best == 0 or counts["en"] == best:
        return "en"
    return "pt" if counts["pt"] >= counts["es"] else "es"


_EN_PRONOUNS = {"the customer's": "your", "the customer": "you", "their": "your",
                "theirs": "yours", "they": "you", "them": "you"}
_PT_ES_THIRD_PERSON = re.compile(
    r"\s+(?:da pessoa|do cliente|da cliente|de la persona|del cliente)\b", re.IGNORECASE
)


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _english_question(rest: str) -> str:
    for pronoun, replacement in _EN_PRONOUNS.items():
        rest = re.sub(rf"\b{re.escape(pronoun)}\b", replacement, rest, flags=re.IGNORECASE)
    if re.match(r"(?i)(for|about)\s+", rest):
        question = "Could you tell me " + re.sub(r"(?i)^(for|about)\s+", "", rest)
    elif re.match(r"(?i)you\s+to\s+", rest):
        question = "Could you " + re.sub(r"(?i)^you\s+to\s+", "", rest)
    elif re.match(r"(?i)(you\s+)?(which|what|when|where|who|how|whether|if)\b", rest):
        question = re.sub(r"(?i)^you\s+", "", rest)
        question = re.sub(r"(?i)^(whether|if)\s+", "", question)
    else:
        question = "Could you tell me " + rest
    return _capitalized(question) + "?"


def _portuguese_question(verb: str, rest: str) -> str:
    rest = _PT_ES_THIRD_PERSON.sub("", rest)
    if re.match(r"(?i)se\s+", rest):
        return _capitalized(re.sub(r"(?i)^se\s+", "", rest)) + "?"
    rest = re.sub(r"(?i)^o\s+", "o seu ", rest)
    rest = re.sub(r"(?i)^a\s+", "a sua ", rest)
    lead = "Poderia me passar " if verb.lower().startswith(("peç", "pec")) else "Poderia me dizer "
    return lead + rest + "?"


def _spanish_question(verb: str, rest: str) -> str:
    rest = _PT_ES_THIRD_PERSON.sub("", rest)
    if re.match(r"(?i)si\s+", rest):
        return "¿" + _capitalized(re.sub(r"(?i)^si\s+", "", rest)) + "?"
    rest = re.sub(r"(?i)^(?:por\s+)?(el|la)\s+", "su ", rest)
    lead = "¿Me podría dar " if verb.lower().startswith("pid") else "¿Me podría decir "
    return lead + rest + "?"


def ask_as_question(ask: str) -> str:
    """An "Ask ..." instruction (English, Portuguese, Spanish) turned into the question it
    describes; anything else as given. In Portuguese and Spanish the part after the first comma
    is read as a tone note ("..., sem tom de formulário") and dropped.

    "Ask for the customer's first name." -> "Could you tell me your first name?";
    "Ask which day suits them." -> "Which day suits you?";
    "Pergunte se prefere de manhã ou à tarde." -> "Prefere de manhã ou à tarde?"
    """
    text = ask.strip().rstrip(".!")
    english = re.match(r"(?i)ask\s+(.*)$", text)
    if english:
        return _english_question(english.group(1).rstrip("?"))
    other = re.match(r"(?i)(pergunte|peça|peca|preg[uú]nta(?:le)?|pide(?:le)?)\s+(.*)$", text)
    if not other:
        return ask.strip()
    verb, rest = other.group(1), other.group(2).split(",")[0].strip().rstrip("?")
    if verb.lower().startswith(("pergunte", "peç", "pec")):
        return _portuguese_question(verb, rest)
    return _spanish_question(verb, rest)


def _question_of(name: str, spec: dict[str, Any]) -> str:
    """The question these rules ask for a field (see ``speak``)."""
    ask = spec.get("ask") or spec.get("description")
    return ask_as_question(str(ask)) if ask else f"Could you tell me your {name}?"


def _last_question(request: ModelRequest) -> str | None:
    """The assistant's last entry in the transcript."""
    for message in reversed(request.messages):
        if message.role == "assistant":
            text = (message.text or "").strip()
            return text or None
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array"


def fits(value: Any, schema: Any) -> bool:
    """Whether ``value`` passes the ``type``/``enum``/``anyOf`` of a property schema.

    Enough of JSON Schema to keep the rules from answering outside an envelope; anything the
    schema says beyond those keywords is left to the engine's own validation.
    """
    if not isinstance(schema, dict):
        return True
    if "enum" in schema and value not in schema["enum"]:
        return False
    for key in ("anyOf", "oneOf"):
        if key in schema and not any(fits(value, branch) for branch in schema[key]):
            return False
    declared = schema.get("type")
    if declared is None:
        return True
    allowed = {declared} if isinstance(declared, str) else set(declared)
    actual = _json_type(value)
    return actual in allowed or (actual == "integer" and "number" in allowed)


def _properties(schema: Any) -> dict[str, Any]:
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        return dict(schema["properties"])
    return {}


def _fill(schema: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Every property of ``schema``: its value when it fits, else None."""
    return {
        name: values.get(name) if fits(values.get(name), prop) else None
        for name, prop in _properties(schema).items()
    }


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class RuleProvider:
    """Answers understand, speak and compact calls by fixed rules; see the module docstring.

    A demo aid so that ``turnflow dev`` and the examples run with no model key and no network.
    Its judgements are word matches, so it will misread anything phrased differently from the
    flow phrases and field enums; use a real provider for anything but a demo or a test.
    """

    description = "offline RuleProvider (a demo aid, not a model)"

    def __init__(self, *, hooks: ProviderHooks | None = None) -> None:
        self.hooks = hooks or ProviderHooks()

    def __repr__(self) -> str:
        return "RuleProvider()"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        async def call() -> ModelResponse:
            if request.schema_name == "understand":
                return self.understand(request)
            if request.schema_name == "speak":
                return self.speak(request)
            if request.schema_name == "skills":
                return self.skills(request)
            if request.schema_name == "vision":
                return ModelResponse(json={"description": VISION_NOTE})
            return self.compact(request)

        return await observed(
            self.hooks, provider=PROVIDER_NAME, schema_name=request.schema_name, call=call,
            request=request,
        )

    def understand(self, request: ModelRequest) -> ModelResponse:
        meta = request.meta
        message = str(meta.get("message") or "")
        parts = message_parts(meta)
        envelope: dict[str, Any] = {}
        for section, schema in _properties(request.json_schema).items():
            names = list(_properties(schema))
            found: dict[str, Any]
            if section == "flows":
                phrases = _dict(meta.get("flows"))
                found = {n: flow_score(list(phrases.get(n) or []), message) for n in names}
            elif section == "mentions":
                phrases = _dict(meta.get("mentions"))
                found = {n: mentioned(list(phrases.get(n) or []), message) for n in names}
            elif section == "branches":
                answer = latest(parts, read_yes_no)
                found = {n: answer for n in names}
            elif section == "fields":
                specs = _dict(meta.get("fields"))
                found = {n: latest_value(parts, _dict(specs.get(n)), n) for n in names}
                asked = _last_question(request)
                for n in names:
                    spec = _dict(specs.get(n))
                    if found[n] is None and parts and asked and asked.endswith(
                            _question_of(n, spec)):
                        # The assistant's last words asked for this field: the latest
                        # message answers it, as a model reading the conversation would take it.
                        found[n] = direct_answer(spec, parts[-1], name=n)
            elif section == "extract":
                per_flow = _dict(meta.get("extract"))
                found = {
                    flow_id: _fill(flow_schema, {
                        param: latest_value(
                            parts, _dict(_dict(per_flow.get(flow_id)).get(param)), param)
                        for param in _properties(flow_schema)
                    })
                    for flow_id, flow_schema in _properties(schema).items()
                }
            else:
                envelope[section] = None  # a section these rules do not know
                continue
            envelope[section] = _fill(schema, found)
        return ModelResponse(json=envelope)

    def speak(self, request: ModelRequest) -> ModelResponse:
        meta = request.meta
        message = str(meta.get("message") or "")
        parts = message_parts(meta)
        if not message and meta.get("retry"):
            # A retry answers the customer message the failed call left unanswered.
            said = [m.text for m in request.messages if m.role == "user"]
            message = said[-1] if said else ""
            parts = [message] if message else []
        pending = _dict(meta.get("pending"))
        asked_before = any(m.role == "assistant" for m in request.messages)
        found: dict[str, Any] = {}
        for index, (name, raw_spec) in enumerate(pending.items()):
            spec = _dict(raw_spec)
            value = latest_value(parts, spec, name)
            if value is None and index == 0 and asked_before and parts:
                # The first pending field is the one the last reply asked for: the last
                # message is the answer to it.
                value = direct_answer(spec, parts[-1], name=name)
            if value is not None:
                found[name] = value
        still_pending = [name for name in pending if name not in found]
        texts = [message, str(meta.get("prompt") or "")]
        texts += [str(_dict(spec).get("ask") or "") for spec in pending.values()]
        language = guess_language(texts)
        thanks, polite = _STOCK_REPLIES[language]
        if still_pending:
            first = _dict(pending[still_pending[0]])
            ask = first.get("ask") or first.get("description")
            default = f"Could you tell me your {still_pending[0]}?"
            text = ask_as_question(str(ask)) if ask else default
            heard = [str(v) for n, v in found.items() if _listed(_dict(pending[n]))]
            if heard:  # say which choice was heard, so the customer knows it counted
                text = f"{_NOTED[language].format(', '.join(heard))} {text}"
        elif pending:
            text = thanks
        elif meta.get("prompt"):
            text = ask_as_question(str(meta["prompt"]))
        else:
            text = polite
        if text in (meta.get("already_sent") or []):
            text = polite if text != polite else thanks
        if len(parts) > 1 and not asked_before and not meta.get("already_sent") and greets(
                parts):
            # The first thing the assistant says, to a burst that opened with a hello.
            known = {**_dict(meta.get("known")), **found}
            name = next((v for k, v in known.items() if _NAME_FIELD.search(k) and
                         isinstance(v, str) and v), "")
            text = f"{_HELLO[language].format(f' {name}' if name else '')} {text}"
        schema = request.json_schema
        if not _properties(schema):
            return ModelResponse(text=text)
        return ModelResponse(text=text, json=_fill(schema, {**found, "message": text}))

    def skills(self, request: ModelRequest) -> ModelResponse:
        """The skill classifier: the (at most two) skills whose description shares the most
        words with the message, and the message's language."""
        message = str(request.meta.get("message") or "")
        scored = [
            (flow_score([str(description)], message), name)
            for name, description in _dict(request.meta.get("skills")).items()
        ]
        picked = [name for score, name in sorted(scored, key=lambda s: -s[0]) if score > 0][:2]
        marked = any(w in m for w in words(message) for m in _LANGUAGE_MARKERS.values())
        language = guess_language([message]) if marked else None
        return ModelResponse(json={"skills": picked, "language": language})

    def compact(self, request: ModelRequest) -> ModelResponse:
        entries = request.meta.get("entries")
        count = entries if isinstance(entries, int) else len(request.messages)
        said = [m.text.strip() for m in request.messages if m.role == "user" and m.text.strip()]
        quoted = "; ".join(f'"{text[:60]}"' for text in said[:3])
        summary = f"Summary of {count} earlier entries." + (
            f" The customer said: {quoted}." if quoted else ""
        )
        strings = {
            name: summary for name, prop in _properties(request.json_schema).items()
            if fits(summary, prop)
        }
        json = _fill(request.json_schema, strings) if strings else None
        return ModelResponse(text=summary, json=json)


__all__ = [
    "RuleProvider",
    "ask_as_question",
    "extract_value",
    "flow_score",
    "greets",
    "latest",
    "message_parts",
    "read_yes_no",
]
