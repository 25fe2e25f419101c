"""RuleProvider: phrase scores, typed extraction, replies, and envelopes that fit their schema."""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from engine.providers import RuleProvider
from engine.providers.base import CallRecord, ChatMessage, ModelRequest, ProviderHooks, ToolSpec
from engine.providers.rules import (
    POLITE_DEFAULT,
    THANKS,
    ask_as_question,
    extract_value,
    flow_score,
    guess_language,
    normalize,
    read_yes_no,
)

# Envelope schemas in the shape the engine sends: every property required and nullable.
_JSON_TYPES = {"string": "string", "number": "number", "integer": "integer",
               "boolean": "boolean", "date": "string", "datetime": "string", "email": "string"}
_FORMATS = {"date": "date", "datetime": "date-time", "email": "email"}


def field_schema(spec: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": [_JSON_TYPES[spec.get("type", "string")], "null"]}
    if spec.get("type") in _FORMATS:
        schema["format"] = _FORMATS[spec["type"]]
    if spec.get("enum"):
        schema["enum"] = [*spec["enum"], None]
    return schema


def obj(properties: dict[str, Any], *, nullable: bool = False) -> dict[str, Any]:
    return {"type": ["object", "null"] if nullable else "object", "properties": properties,
            "required": list(properties), "additionalProperties": False}


FIELDS: dict[str, dict[str, Any]] = {
    "email": {"type": "email", "ask": "Ask for their e-mail."},
    "people": {"type": "integer", "ask": "Ask how many people are coming."},
    "budget": {"type": "number"},
    "day": {"type": "date"},
    "when": {"type": "datetime"},
    "newsletter": {"type": "boolean"},
    "service": {"type": "string", "enum": ["tune-up", "flat-tire", "brakes"]},
    "name": {"type": "string", "ask": "Ask for the customer's first name."},
}
FLOWS = {"booking": ["book a repair", "fix my bike"], "hours": ["opening hours"],
         "pricing": ["quanto custa", "preço"]}
MENTIONS = {"complaint": ["reclamação", "complaint"]}
EXTRACT = {"complaint": {"order": {"type": "integer"}}}


def understand_request(message: str) -> ModelRequest:
    schema = obj({
        "flows": obj({f: {"type": ["integer", "null"], "minimum": 0, "maximum": 100}
                      for f in FLOWS}),
        "mentions": obj({m: {"type": ["boolean", "null"]} for m in MENTIONS}),
        "extract": obj({m: obj({p: field_schema(s) for p, s in ps.items()}, nullable=True)
                        for m, ps in EXTRACT.items()}),
        "branches": obj({"q1": {"type": ["boolean", "null"]}}),
        "fields": obj({n: field_schema(s) for n, s in FIELDS.items()}),
    })
    return ModelRequest(
        schema_name="understand", system="(prose the rules never read)",
        messages=[ChatMessage(role="user", text=message)], json_schema=schema,
        meta={"flows": FLOWS, "mentions": MENTIONS, "branches": {"q1": "Is that all?"},
              "fields": FIELDS, "extract": EXTRACT, "message": message},
    )


def speak_request(message: str | None, pending: list[str], *, prompt: str | None = None,
                  history: list[ChatMessage] | None = None,
                  already_sent: list[str] | None = None) -> ModelRequest:
    specs = {n: FIELDS[n] for n in pending}
    messages = list(history or [])
    if message is not None:
        messages.append(ChatMessage(role="user", text=message))
    return ModelRequest(
        schema_name="speak", system="(prose)", messages=messages,
        json_schema=obj({"message": {"type": ["string", "null"]},
                         **{n: field_schema(s) for n, s in specs.items()}}),
        tools=[ToolSpec(name="lookup")],
        meta={"prompt": prompt, "pending": specs, "known": {}, "message": message,
              "agent_name": "Ana", "already_sent": already_sent or [], "retry": False},
    )


def valid(request: ModelRequest, envelope: dict[str, Any] | None) -> bool:
    validator = Draft202012Validator(request.json_schema,
                                     format_checker=Draft202012Validator.FORMAT_CHECKER)
    return envelope is not None and not list(validator.iter_errors(envelope))


# --- scores and yes/no ---------------------------------------------------------------------

@pytest.mark.parametrize(
    ("phrases", "message", "score"),
    [
        (["book a repair"], "Hi, I'd like to BOOK a repair please", 100),
        (["book a repair"], "can I book one?", 45),
        (["fix my bike"], "please fix the bike", 90),
        (["fix my bike"], "my bikes need fixing", 45),  # "fix" is too short to be a stem
        (["quanto custa", "preço"], "Qual o preco?", 100),
        (["opening hours"], "oi, tudo bem?", 0),
        ([], "anything", 0),
    ],
)
def test_flow_score_by_phrase_overlap(phrases: list[str], message: str, score: int) -> None:
    """A whole phrase scores 100 (case and accents aside); shared words score up to 90."""
    assert flow_score(phrases, message) == score


@pytest.mark.parametrize(
    ("message", "answer"),
    [("yes please", True), ("Sim, pode ser", True), ("Sí, claro", True), ("ok", True),
     ("No.", False), ("não, obrigado", False), ("nunca", False), ("not today", False),
     ("marcar no sábado", None), ("talvez amanhã", None), ("", None)],
)
def test_read_yes_no(message: str, answer: bool | None) -> None:
    """Yes and no read in English, Portuguese and Spanish; "no" mid-sentence is Portuguese."""
    assert read_yes_no(message) is answer


# --- extraction per type -------------------------------------------------------------------

@pytest.mark.parametrize(
    ("spec", "message", "value"),
    [
        ({"type": "email"}, "write to Ana.Souza+bikes@example.com.br thanks",
         "Ana.Souza+bikes@example.com.br"),
        ({"type": "email"}, "no email here @ all", None),
        ({"type": "integer"}, "seremos 4 pessoas", 4),
        ({"type": "integer"}, "about 2.5 or 3", 3),
        ({"type": "integer"}, "on 2026-03-01 at 10:30", None),
        ({"type": "number"}, "até R$ 1.500,50 por mês", 1500.5),
        ({"type": "number"}, "around 12,5 kg", 12.5),
        ({"type": "number"}, "budget: 1,500", 1500),
        ({"type": "number"}, "-3.25 degrees", -3.25),
        ({"type": "number"}, "nothing numeric", None),
        ({"type": "boolean"}, "sim", True),
        ({"type": "boolean"}, "no thanks", False),
        ({"type": "boolean"}, "maybe", None),
        ({"type": "date"}, "dia 2026-03-01 de manhã", "2026-03-01"),
        ({"type": "date"}, "el 05/03/2026", "2026-03-05"),
        ({"type": "date"}, "2026-02-30 is no day", None),
        ({"type": "datetime"}, "at 2026-03-01 10:30Z", "2026-03-01T10:30:00+00:00"),
        ({"type": "datetime"}, "2026-03-01T10:30:15-0300", "2026-03-01T10:30:15-03:00"),
        ({"type": "datetime"}, "only 2026-03-01", None),
        ({"type": "string", "enum": ["tune-up", "flat-tire", "brakes"]},
         "a Flat tire and maybe brakes", "flat-tire"),
        ({"type": "string", "enum": ["tune-up", "flat-tire", "brakes"]}, "my brake", "brakes"),
        ({"type": "string", "enum": ["tune-up", "flat-tire", "brakes"]}, "a new bell", None),
        ({"type": "integer", "enum": [1, 2, 4]}, "for 4 people", 4),
        ({"type": "string"}, "just some words", None),
    ],
)
def test_extract_value_per_type(spec: dict[str, Any], message: str, value: Any) -> None:
    """Each field type has one pattern; anything it does not match is None."""
    assert extract_value(spec, message) == value


@pytest.mark.parametrize(
    ("message", "name"),
    [("Hi, my name is Ana Souza.", "Ana Souza"), ("oi, me chamo João", "João"),
     ("Meu nome é Maria, tudo bem?", "Maria"), ("me llamo Pedro", "Pedro"),
     ("hello there", None)],
)
def test_extract_name_from_an_introduction(message: str, name: str | None) -> None:
    """A name field is read from "my name is ..." style introductions only."""
    assert extract_value({"type": "string"}, message, name="name") == name
    assert extract_value({"type": "string"}, message, name="city") is None


@pytest.mark.parametrize(
    ("ask", "question"),
    [
        ("Ask for the customer's first name.", "Could you tell me your first name?"),
        ("Ask which day, Monday to Saturday, suits them.",
         "Which day, Monday to Saturday, suits you?"),
        ("Ask them to confirm the booking (yes or no).",
         "Could you confirm the booking (yes or no)?"),
        ("Pergunte o nome da pessoa, sem tom de formulário.", "Poderia me dizer o seu nome?"),
        ("Pergunte se prefere de manhã ou à tarde.", "Prefere de manhã ou à tarde?"),
        ("Peça um e-mail para enviar a confirmação.",
         "Poderia me passar um e-mail para enviar a confirmação?"),
        ("Pregúntale el nombre", "¿Me podría decir su nombre?"),
        ("What is your e-mail?", "What is your e-mail?"),
    ],
)
def test_ask_as_question(ask: str, question: str) -> None:
    """An "Ask ..." instruction becomes the question itself; other text is kept."""
    assert ask_as_question(ask) == question


# --- understand ----------------------------------------------------------------------------

def test_understand_envelope_judges_every_section() -> None:
    """Flows, mentions, extract, branches and fields all come back, filled from the message."""
    request = understand_request(
        "Yes! I want to book a repair, the brakes; complaint about order 77, "
        "mail me at a@b.co on 2026-03-01"
    )
    envelope = RuleProvider().understand(request).json
    assert valid(request, envelope)
    assert envelope is not None
    assert envelope["flows"] == {"booking": 100, "hours": 0, "pricing": 0}
    assert envelope["mentions"] == {"complaint": True}
    assert envelope["extract"] == {"complaint": {"order": 77}}
    assert envelope["branches"] == {"q1": True}
    fields = envelope["fields"]
    assert (fields["email"], fields["day"], fields["service"]) == ("a@b.co", "2026-03-01",
                                                                    "brakes")
    assert fields["name"] is None and fields["when"] is None


def test_understand_nulls_what_it_cannot_read() -> None:
    """A message with nothing to read scores 0, mentions false, and leaves the rest null."""
    request = understand_request("hmm")
    envelope = RuleProvider().understand(request).json
    assert valid(request, envelope)
    assert envelope == {
        "flows": {"booking": 0, "hours": 0, "pricing": 0},
        "mentions": {"complaint": False},
        "extract": {"complaint": {"order": None}},
        "branches": {"q1": None},
        "fields": dict.fromkeys(FIELDS),
    }


def test_understand_answers_only_the_sections_asked() -> None:
    """Sections absent from the schema are absent from the envelope; unknown ones are null."""
    request = ModelRequest(
        schema_name="understand", system="",
        json_schema=obj({"flows": obj({"hours": {"type": ["integer", "null"]}}),
                         "mood": obj({})}),
        meta={"flows": {"hours": ["opening hours"]}, "message": "opening hours?"},
    )
    assert RuleProvider().understand(request).json == {"flows": {"hours": 100}, "mood": None}


def test_value_outside_the_schema_becomes_null() -> None:
    """A value the schema's enum or type would reject is answered as null instead."""
    request = ModelRequest(
        schema_name="understand", system="",
        json_schema=obj({"fields": obj({"size": {"type": ["integer", "null"], "enum": [1, 2]}})}),
        meta={"fields": {"size": {"type": "integer"}}, "message": "size 7"},
    )
    assert RuleProvider().understand(request).json == {"fields": {"size": None}}


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=120))
def test_understand_envelope_always_fits_and_repeats(message: str) -> None:
    """For any message the envelope validates against its schema and is the same twice."""
    request = understand_request(message)
    first = RuleProvider().understand(request)
    assert valid(request, first.json)
    assert RuleProvider().understand(request) == first


# --- speak ---------------------------------------------------------------------------------

def test_speak_asks_the_first_pending_field() -> None:
    """With nothing answered, the reply is the first pending field's ask as a question."""
    request = speak_request("oi", ["name", "email"], prompt="Greet warmly.")
    response = RuleProvider().speak(request)
    assert response.json == {"message": "Could you tell me your first name?", "name": None,
                             "email": None}
    assert response.text == "Could you tell me your first name?"
    assert response.tool_calls == [] and valid(request, response.json)


def test_speak_reads_a_direct_answer_and_asks_the_next() -> None:
    """After the assistant asked, a short reply answers the first pending field."""
    history = [ChatMessage(role="assistant", text="Could you tell me your first name?")]
    request = speak_request("Ana", ["name", "email"], history=history)
    envelope = RuleProvider().speak(request).json
    assert envelope == {"message": "Could you tell me your e-mail?", "name": "Ana", "email": None}
    assert valid(request, envelope)


@pytest.mark.parametrize(
    ("reply", "name"),
    [("Sou a Júlia", "Júlia"), ("I'm Ana.", "Ana"), ("soy Pedro", "Pedro"), ("Ana", "Ana"),
     ("sim", None), ("I would rather not say that right now", None)],
)
def test_speak_direct_answer_drops_the_lead_in(reply: str, name: str | None) -> None:
    """A reply to the name question loses its "I'm"/"sou a" lead-in; yes/no or long is no name."""
    history = [ChatMessage(role="assistant", text="Could you tell me your first name?")]
    envelope = RuleProvider().speak(speak_request(reply, ["name"], history=history)).json
    assert envelope is not None and envelope["name"] == name


@pytest.mark.parametrize(
    ("texts", "language"),
    [(["Pergunte o nome da pessoa", "oi"], "pt"), (["Pregúntale el nombre", "hola"], "es"),
     (["Ask for the customer's first name."], "en"), (["", "42"], "en")],
)
def test_guess_language(texts: list[str], language: str) -> None:
    """Marker words pick the language of stock replies; nothing to go on means English."""
    assert guess_language(texts) == language


def test_stock_replies_follow_the_language() -> None:
    """A Portuguese conversation gets Portuguese thanks and a Portuguese default."""
    specs = {"periodo": {"type": "string", "enum": ["manhã", "tarde"],
                         "ask": "Pergunte se prefere de manhã ou à tarde."}}
    request = ModelRequest(
        schema_name="speak", system="",
        json_schema=obj({"message": {"type": ["string", "null"]},
                         "periodo": field_schema(specs["periodo"])}),
        meta={"prompt": None, "pending": specs, "message": "de manhã, por favor"},
    )
    assert RuleProvider().speak(request).json == {"message": "Perfeito, anotado.",
                                                  "periodo": "manhã"}
    idle = ModelRequest(schema_name="speak", system="", meta={"message": "olá, tudo bem?"})
    assert RuleProvider().speak(idle).text == "Como posso ajudar?"


def test_speak_retry_reads_the_unanswered_message() -> None:
    """On a retry with no new message, fields are read from the last customer message."""
    history = [ChatMessage(role="user", text="brakes, please")]
    request = speak_request(None, ["service"], history=history)
    retry = request.model_copy(update={"meta": {**request.meta, "retry": True}})
    assert RuleProvider().speak(request).json == {
        "message": "Could you tell me your service?", "service": None}
    assert RuleProvider().speak(retry).json == {"message": THANKS, "service": "brakes"}


def test_speak_does_not_take_a_greeting_as_a_name() -> None:
    """Without a prior question, a plain string field is not read from the message."""
    envelope = RuleProvider().speak(speak_request("boa tarde", ["name"])).json
    assert envelope is not None and envelope["name"] is None


def test_speak_thanks_when_everything_was_answered() -> None:
    """When the message answers every pending field the reply thanks the customer."""
    request = speak_request("tune-up please, for 3 people", ["service", "people"])
    assert RuleProvider().speak(request).json == {"message": THANKS, "service": "tune-up",
                                                  "people": 3}


def test_speak_without_pending_uses_the_prompt_or_a_default() -> None:
    """No pending fields: the step prompt is phrased; no prompt gives the polite default."""
    prompted = RuleProvider().speak(speak_request("hi", [], prompt="Ask them to pick a color."))
    idle = RuleProvider().speak(speak_request(None, []))
    assert prompted.json == {"message": "Could you pick a color?"}
    assert idle.json == {"message": POLITE_DEFAULT}


def test_speak_never_repeats_what_was_already_sent() -> None:
    """A reply equal to a text this turn already sent is swapped for another."""
    request = speak_request(None, [], already_sent=[POLITE_DEFAULT])
    assert RuleProvider().speak(request).text == THANKS


def test_speak_without_schema_answers_text_only() -> None:
    """A speak call with no schema gets the text and no JSON."""
    request = ModelRequest(schema_name="speak", system="", meta={"prompt": None})
    response = RuleProvider().speak(request)
    assert (response.text, response.json) == (POLITE_DEFAULT, None)


# --- compact, dispatch, hooks --------------------------------------------------------------

def test_compact_summarizes_into_the_schema() -> None:
    """The compact call counts the entries and quotes what the customer said."""
    request = ModelRequest(
        schema_name="compact", system="",
        messages=[ChatMessage(role="user", text="I need brakes fixed"),
                  ChatMessage(role="assistant", text="Which day?"),
                  ChatMessage(role="user", text="Friday")],
        json_schema=obj({"summary": {"type": ["string", "null"]}}),
        meta={"entries": 3},
    )
    response = RuleProvider().compact(request)
    expected = 'Summary of 3 earlier entries. The customer said: "I need brakes fixed"; "Friday".'
    assert response.text == expected and response.json == {"summary": expected}
    assert valid(request, response.json)


async def test_generate_dispatches_and_reports_to_hooks() -> None:
    """generate answers by schema name and reports each call as provider "rules"."""
    records: list[CallRecord] = []
    provider = RuleProvider(hooks=ProviderHooks([records.append]))
    understood = await provider.generate(understand_request("opening hours"))
    spoken = await provider.generate(speak_request("oi", ["email"]))
    compacted = await provider.generate(ModelRequest(schema_name="compact", system=""))
    assert understood.json is not None and understood.json["flows"]["hours"] == 100
    assert spoken.text == "Could you tell me your e-mail?"
    assert compacted.text == "Summary of 0 earlier entries."
    assert [(r.provider, r.schema_name, r.ok) for r in records] == [
        ("rules", "understand", True), ("rules", "speak", True), ("rules", "compact", True)]
    assert "demo aid" in provider.description and repr(provider) == "RuleProvider()"


async def test_the_skill_classifier_picks_at_most_two_skills_sharing_words() -> None:
    """The offline classifier: skills whose description shares words with the message, best
    first, at most two; the language only when marker words tell it."""

    request = ModelRequest(schema_name="skills", system="", messages=[], json_schema={}, meta={
        "message": "quero trocar o tênis e saber do frete", "skills": {
            "trocas": "trocas e devoluções de tênis", "frete": "prazos de frete",
            "boletos": "segunda via de boleto", "tenis": "tênis de corrida"}})
    answer = (await RuleProvider().generate(request)).json
    assert answer is not None and len(answer["skills"]) == 2
    assert "boletos" not in answer["skills"] and answer["language"] == "pt"
    silent = request.model_copy(update={"meta": {"message": "xyz", "skills": {"a": "b"}}})
    assert (await RuleProvider().generate(silent)).json == {"skills": [], "language": None}


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=127), max_size=30))
def test_normalize_of_ascii_text_is_lower_case(text: str) -> None:
    """``normalize`` returns ASCII text lower-cased without decomposing it: the same as the
    decomposition and combining-mark filter it skips."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    assert normalize(text) == "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def test_normalize_still_drops_accents() -> None:
    assert normalize("Não, AÇÚCAR") == "nao, acucar"
