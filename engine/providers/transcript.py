"""The append-only layout (``layout="append"``): each call of a conversation sends the previous
call's prompt and reply, then only what is new, so a server's prefix cache serves all of it but
the new part.

A ReAct agent's message list only grows, so each of its calls reads what is new and nothing
else. turnflow's prompts are built per call from the conversation's history and this turn's
sections (``engine.prompt``), and the next turn puts new history where those sections were:
every call evaluates its sections afresh. Here an OpenAI-compatible provider keeps, per
conversation, the chat entries it last sent after the system prompt (``Transcripts``), and
lays the next call out as:

- the system prompt: the text fixed for the agent version that both call kinds share
  (``ModelRequest.prefix``: identity, knowledge, the understand task and its topics);
- the entries sent before, as they were sent, with the understand call's reply after its own
  sections (speak's reply is in the history as what was said);
- the history entries new since (what was said, the customer's new words);
- this call's own sections, as a system entry, last.

So the understand and the speak call of one turn share everything up to speak's sections, and
the next turn's understand call sends the previous speak call's prompt with what was said and
the customer's next words after it.

Replies are shorter in this layout too (``short_reply``): the understand call is asked to leave
out every score of 0 and every value the message does not give, and its response schema lets
it (``optional_schema``: no property required, everything it refuses still refused); a speak
call that offers no field and no tool asks for the reply as plain text, with no response
format, so the model writes no wrapper the customer never sees.

What is kept is a cache of what was sent, never a source of truth: a call uses it only when the
host's history for the call holds the history the kept entries were built from, followed only
by new entries (the entries before it, when the window holds more, are not sent again; never a
compaction summary), the system prompt is the same, and no tool round is in progress.
Otherwise (the first call, a compaction, a history window that moved past the kept entries,
another agent version, a process restart, a tool round) the call lays out a new transcript from
its request alone and the server's cache starts a new prefix (``Transcripts.restarts`` counts
them). When the window moved past the kept entries (a conversation longer than the host's
window), the new transcript starts at the customer message nearest the middle of the window,
so the next turns append again until the window moves past that one: a new prefix every half
window of entries rather than on every turn, and the model always sees at least the later half
of the window. The history window and compaction still bound what is sent. So does
``max_chars``: since every turn's sections stay in the transcript, it grows faster than the
history (about 1,200 characters a turn for the demo agent); once the kept entries pass
``max_chars`` the next call starts a new transcript the same way, at the customer message
nearest the middle of its history. At most ``max_conversations`` conversations are kept, least
recently used first out.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from engine.providers.base import ChatMessage, ModelRequest, laid_out

JSON_REPLY = 'Answer with one JSON object: "message" is your reply to the customer.'
"""The speak prompt's response format when the call offers no field (``engine.prompt``)."""
PLAIN_REPLY = "Answer with your reply to the customer alone, as plain text."
"""What the append-only layout asks instead, where the call offers no field and no tool."""
SHORT_UNDERSTAND = ("Leave out every score of 0, every value the message does not give and "
                    "every section left empty.")
"""Added after the understand prompt's response format in the append-only layout."""

MAX_CONVERSATIONS = 1024
"""Conversations whose transcript a provider keeps (the least recently used goes first)."""
MAX_CHARS = 12_000
"""The most characters of kept entries a call appends to (about 3,000 tokens): past it, a new
transcript starts (a llama.cpp slot of 4,096 tokens, the test server's, then still holds the
system prompt, the transcript and the reply)."""


@dataclass
class _Kept:
    system: str
    history: tuple[tuple[str, str], ...]
    entries: list[dict[str, Any]]
    chars: int = 0
    """Characters of text in ``entries`` (set when kept)."""


def plain_reply(request: ModelRequest) -> bool:
    """A speak call whose only property is the message and that offers no tool: its reply is
    asked for as plain text in the append-only layout."""
    properties = request.json_schema.get("properties")
    return (
        request.schema_name == "speak"
        and not request.tools
        and isinstance(properties, dict)
        and list(properties) == ["message"]
    )


def optional_schema(schema: Any) -> Any:
    """``schema`` with no property required, at any depth: the model may leave out what it has
    no value for; types, enums, bounds and ``additionalProperties: false`` are kept, so a value
    or a name the schema refused is still refused."""
    if isinstance(schema, dict):
        return {k: optional_schema(v) for k, v in schema.items() if k != "required"}
    if isinstance(schema, list):
        return [optional_schema(v) for v in schema]
    return schema


def short_reply(request: ModelRequest, turn: str) -> str:
    """This call's sections as the append-only layout sends them: an understand call asked to
    leave out what is zero or not given, a plain-text speak call asked for plain text."""
    if request.schema_name == "understand" and request.json_schema:
        return f"{turn}\n{SHORT_UNDERSTAND}"
    if plain_reply(request) and turn.endswith(JSON_REPLY):
        return turn[: -len(JSON_REPLY)] + PLAIN_REPLY
    return turn


SUMMARY_PREFIX = "[Summary of the earlier conversation] "
"""How a compaction summary entry starts (``engine.compaction.SUMMARY_PREFIX``)."""


def _kept_at(kept: tuple[tuple[str, str], ...], history: tuple[tuple[str, str], ...]) -> int | None:
    """Where ``kept`` starts in ``history`` when ``history`` is some earlier entries (never a
    compaction summary), then ``kept``, then new entries; None otherwise."""
    n = len(kept)
    for at in range(len(history) - n + 1):
        if history[at : at + n] == kept:
            if any(text.startswith(SUMMARY_PREFIX) for _, text in history[:at]):
                return None
            return at
    return None


def _moved(kept: tuple[tuple[str, str], ...], history: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``history`` starts with the end of ``kept``: the window moved past its head."""
    return any(history[: len(kept) - j] == kept[j:] for j in range(1, len(kept)))


def _half(history: tuple[tuple[str, str], ...]) -> int:
    """The first customer entry at or after the middle of ``history`` (0 when it opens with a
    compaction summary, which stays in view, or has no customer entry there)."""
    if history and history[0][1].startswith(SUMMARY_PREFIX):
        return 0
    for at in range(len(history) // 2, len(history)):
        if history[at][0] == "user":
            return at
    return 0


def _history_of(messages: list[ChatMessage]) -> tuple[tuple[str, str], ...]:
    return tuple((m.role, m.text) for m in messages if m.role in ("user", "assistant"))


class Transcripts:
    """What a provider sent each conversation last (see the module docstring)."""

    def __init__(
        self, max_conversations: int = MAX_CONVERSATIONS, max_chars: int = MAX_CHARS
    ) -> None:
        self.max_conversations = max_conversations
        self.max_chars = max_chars
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self.restarts = 0
        """Calls that started a new transcript (a new prefix for the server's cache)."""
        self.appended = 0
        """Calls that sent the previous call's prompt and reply, then what is new."""

    def layout(
        self, request: ModelRequest, add: Any
    ) -> tuple[str, list[dict[str, Any]], _Kept | None]:
        """The system prompt and chat entries of ``request`` in the append-only layout, and what
        to keep of them once answered (None: nothing; the call is laid out on its own).
        ``add(out, messages)`` appends chat messages to a list of entries as the provider
        renders them (merging consecutive entries of one role)."""
        head, messages, turn, _ = laid_out(request)
        system = request.prefix if request.prefix else head
        turn = short_reply(request, turn) if turn else turn
        tool_round = any(m.role == "tool" or m.tool_calls for m in messages)
        if not turn or request.conversation is None or tool_round:
            out: list[dict[str, Any]] = []
            add(out, messages)
            if turn:
                out.append({"role": "system", "content": turn})
            return system, out, None
        history = _history_of(messages)
        kept = self._kept.get(request.conversation)
        at = None
        full = False
        if kept is not None and kept.system == system:
            at = _kept_at(kept.history, history)
            full = at is not None and kept.chars > self.max_chars
        if kept is not None and at is not None and not full:
            out = list(kept.entries)
            new = history[at + len(kept.history):]
            history = history[at:]
            self.appended += 1
        else:
            start = 0
            if full or (kept is not None and kept.system == system
                         and _moved(kept.history, history)):
                start = _half(history)
            out = []
            history = new = history[start:]
            self.restarts += 1
        add(out, [ChatMessage(role=role, text=text) for role, text in new])
        if out and out[0]["role"] == "assistant":
            out.insert(0, {"role": "user", "content": "(no new message)"})
        out.append({"role": "system", "content": turn})
        return system, out, _Kept(system, history, out)

    def keep(self, conversation: str, kept: _Kept, reply: str, *, understand: bool) -> None:
        """Keep what a call sent (and, for an understand call, its reply after it)."""
        entries = list(kept.entries)
        if understand and reply:
            entries.append({"role": "assistant", "content": reply})
        chars = sum(len(e["content"]) for e in entries if isinstance(e["content"], str))
        self._kept[conversation] = _Kept(kept.system, kept.history, entries, chars)
        self._kept.move_to_end(conversation)
        while len(self._kept) > self.max_conversations:
            self._kept.popitem(last=False)

    def forget(self, conversation: str) -> None:
        """Drop a conversation's transcript (its call failed: what it sent is not a prefix)."""
        self._kept.pop(conversation, None)


__all__ = [
    "JSON_REPLY",
    "MAX_CHARS",
    "MAX_CONVERSATIONS",
    "PLAIN_REPLY",
    "SHORT_UNDERSTAND",
    "Transcripts",
    "optional_schema",
    "plain_reply",
    "short_reply",
]
