"""The history window a turn reads: one home for the conversation's last entries.

A turn sees the conversation's last ``HISTORY_LIMIT`` transcript entries. The store reads them
from the turn log (``store.history``: the SQL that selects and aggregates them); everything
else about them is here, pure, for the store, the consumer and the engine alike:

- decoding and validating them (``decode_entries``, ``entries_of_text``);
- keeping a conversation's window between its turns (``HistoryCache``, ``Window``);
- bounding each entry and making the prompt's chat messages of them (``history_messages``,
  ``keep_chat_messages``, ``MAX_HISTORY_ENTRY_CHARS``).

The window kept between turns
-----------------------------
The history windows of recently served conversations, kept between their turns.

Every turn of a conversation gives the engine the conversation's last ``HISTORY_LIMIT`` history
entries. Loaded from the turn log on every turn, the same entries were aggregated by
PostgreSQL, sent, decoded, validated into the engine's ``HistoryEntry`` objects and turned into
chat messages again and again: a conversation 100 turns in spent more on its 50 entries than
on the rest of its turn. Here a consumer keeps each recently served conversation's window as the
entries the engine uses (``engine.HistoryEntry``, frozen: the engine neither validates nor
copies them again, and keeps the chat message built from each on it), keyed by the session
version it is the window of.

Why a window is the load's, exactly, for as long as it is kept:

- the turn log only grows: a save appends one turn at the session's next version, and nothing
  deletes a turn or changes the entries it gave (``turnflow prune`` clears recordings only).
  So the window of version V never changes once V is saved;
- a window is the one a load returned at version V, or a kept window of V, extended with the
  entries the turn saved at V + 1 gave, as the save statement returns them (``turns.history``,
  built by the database: the very values a later load reads), and trimmed to the limit
  (``extend``). The last N entries of a log are the last N of (the last N before the turn,
  then the turn's);
- the load says which version the consumer holds (``LoadRequest.history_version``) and the
  database leaves the history out only when the session is still at that version; a session
  moved on by another consumer, or by a save whose outcome this one never heard, is loaded in
  full and its window replaced.

Anything else leaves no window: a version conflict, a replay or duplicate found at the save,
any error of the turn (see ``HistoryCache``); a revoked partition drops its sessions' windows
(``drop_partitions``). The least recently served
window goes first when ``max_sessions`` are kept; 0 keeps none (every load sends the history,
as before). A window takes about 30-50 KB at 50 entries (``docs/production.md``).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from engine.providers.base import ChatMessage
from engine.records import built, record, share_fields_sets, shared_fields_set
from engine.request import HistoryEntry
from engine.state import TurnState

__all__ = [
    "MAX_HISTORY_ENTRY_CHARS",
    "Decode",
    "HistoryCache",
    "Window",
    "decode_entries",
    "entries_of_text",
    "history_messages",
    "keep_chat_messages",
]

Decode = Callable[[Any], list[dict[str, Any]]]
"""Decodes a loaded history (the database's JSON text, or a decoded list) into entry dicts."""


def _parse_at(value: Any) -> Any:
    """ISO strings become aware datetimes; anything else is handed back as stored."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


def decode_entries(raw: Any, loads: Callable[[Any], Any] | None = None) -> list[dict[str, Any]]:
    """Decode an aggregated history (JSON text, or already decoded) into transcript entry
    dicts, each ``at`` read as an ISO datetime where it is one. ``loads``: the JSON parser
    (the store passes its jsonb decoder); text goes through ``json.loads`` otherwise."""
    if loads is None:
        value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    else:
        value = loads(raw)
    entries: list[dict[str, Any]] = value or []
    for entry in entries:
        entry["at"] = _parse_at(entry.get("at"))
    return entries


MAX_HISTORY_ENTRY_CHARS = 4_000
"""The most of one earlier history entry a prompt carries: an entry past it (a pasted document,
a reply of a model that ran on) is cut there, with the number of characters left out said in
place, so one entry can never push every later prompt past the model's context window. This
turn's own messages are sent whole."""


def _bounded_entry(text: str) -> str:
    """``text`` cut to ``MAX_HISTORY_ENTRY_CHARS``, saying how much was left out."""
    if type(text) is not str or len(text) <= MAX_HISTORY_ENTRY_CHARS:
        return text
    left_out = len(text) - MAX_HISTORY_ENTRY_CHARS
    return f"{text[:MAX_HISTORY_ENTRY_CHARS]} [... {left_out} more characters not shown]"


def history_messages(state: TurnState) -> list[ChatMessage]:
    """The host's history (as trimmed by Load) plus this turn's message (each message of a
    burst as its own entry), each earlier entry bounded (``MAX_HISTORY_ENTRY_CHARS``).

    A model turn asks for these twice (the understand call and the speak call), and with a
    host's full history (50 entries by default) building them is most of what the history costs
    a turn. So the messages built for a turn are kept on its state and handed out again, in a
    new list, while the request and the history entries are the same objects (compaction puts
    new entries in ``state.history``; entries themselves are never edited). A ``ChatMessage``
    is frozen, so the two calls can share them. Entries the host holds across turns
    (``state.history_kept``) keep the message built from each on them, so a host that gives
    the same entries to its next turn (the consumer keeps each conversation's window) has
    them built once, not once a turn."""
    entries = state.history
    kept = state.history_chat
    if (
        kept is not None
        and kept[0] is state.request
        and len(kept[1]) == len(entries)
        and all(a is b for a, b in zip(kept[1], entries, strict=True))
    ):
        return list(kept[2])
    if state.history_kept:
        out = [_kept_chat(e) for e in entries if e.role in ("user", "assistant")]
    else:
        out = [_entry_chat(e) for e in entries if e.role in ("user", "assistant")]
    said = [p.message for p in state.request.parts]
    tail = [(m.role, m.text) for m in out[len(out) - len(said) :]] if said else []
    already_there = len(out) >= len(said) and tail == [
        ("user", _bounded_entry(text)) for text in said
    ]
    if said and not already_there:  # a host may log the messages before the turn
        out.extend(_chat_message("user", text) for text in said)
    elif said and tail != [("user", text) for text in said]:  # logged, and cut: sent whole
        out[len(out) - len(said) :] = [_chat_message("user", text) for text in said]
    state.history_chat = (state.request, tuple(entries), tuple(out))
    return out


def _entry_chat(entry: HistoryEntry, *, kept: bool = False) -> ChatMessage:
    """The chat message of one earlier entry: its text bounded. ``kept``: for keeping on the
    entry, with the fields set every such message shares (``engine.records.share_fields_sets``),
    since a host keeps these between turns."""
    role: Literal["user", "assistant"] = "assistant" if entry.role == "assistant" else "user"
    return _chat_message(role, _bounded_entry(entry.text), kept=kept)


# The slot of ``HistoryEntry`` that keeps the chat message built from the entry (request.py).
_KEPT = HistoryEntry.__dict__["_chat"]
_kept, _keep = _KEPT.__get__, _KEPT.__set__


def keep_chat_messages(entries: Sequence[HistoryEntry]) -> None:
    """Build the chat message a turn's prompt makes of each of ``entries`` (``_entry_chat``)
    and keep it on the entry, as ``_kept_chat`` would on first use, in one pass.

    For a host that keeps entries between turns (the consumer's history windows), called once
    when it makes them: a window of 50 new entries is built in one loop here instead of 50
    calls that each find the slot empty first (an ``AttributeError`` raised and caught per
    entry). Entries of role ``tool`` are never sent as chat messages and get none."""
    for entry in entries:
        if entry.role != "tool":
            _keep(entry, _entry_chat(entry, kept=True))


def _kept_chat(entry: HistoryEntry) -> ChatMessage:
    """``_entry_chat(entry)``, built once per entry and kept on it. Exact because an entry is
    frozen: its role and text are those the message was built from (a copy, or an entry made
    from one with another text, has an empty slot)."""
    try:
        return _kept(entry, HistoryEntry)  # type: ignore[no-any-return]
    except AttributeError:  # not built yet
        message = _entry_chat(entry, kept=True)
        _keep(entry, message)
        return message


_CHAT_GIVEN = frozenset(("role", "text"))
_KEPT_CHAT_FIELDS = shared_fields_set(_CHAT_GIVEN)


def _chat_message(
    role: Literal["user", "assistant"], text: str, *, kept: bool = False
) -> ChatMessage:
    """``ChatMessage(role=role, text=text)``, built as ``engine.records`` builds a turn's own
    records: every call has one per history entry. Text of another type than ``str`` takes
    the validated construction. ``kept``: with the shared fields set of messages kept on
    history entries (``_entry_chat``)."""
    values: dict[str, Any] = {
        "role": role,
        "text": text,
        "tool_call_id": None,
        "tool_calls": [],
        "images": [],
    }
    if kept and type(text) is str:
        return record(ChatMessage, values, _KEPT_CHAT_FIELDS)
    return built(ChatMessage, values, _CHAT_GIVEN, validate=type(text) is not str)



_ENTRIES: TypeAdapter[tuple[HistoryEntry, ...]] = TypeAdapter(tuple[HistoryEntry, ...])


def entries_of_text(
    text: str, decode: Decode | None = None
) -> tuple[HistoryEntry, ...] | list[dict[str, Any]]:
    """A loaded history, given as the JSON text the database sent, as the engine's entries.

    Validated straight from the text in one pass: a cold load's 50 entries cost about half
    what decoding them into dicts (``decode_entries``) and validating those
    did (``decode``: ``decode_entries`` unless given). pydantic reads an entry's ``at`` the way
    it reads an ISO 8601 datetime, which is
    stricter than ``datetime.fromisoformat`` (the decoder's): a value only the latter reads
    (``20261203T1000``, a week date) is refused here, so whatever this refuses is given the
    decoder's way, exactly as before: as entries when they validate, else as the dicts, for
    the engine's own validation to refuse the turn as it always did. Where both read a value
    they read the same instant (tests/consumer/test_history_text.py)."""
    try:
        return _ready_to_keep(_ENTRIES.validate_json(text))
    except ValidationError:
        return _entries_or_dicts((decode or decode_entries)(text))


def _entries_or_dicts(loaded: list[dict[str, Any]]) -> tuple[HistoryEntry, ...] | list[Any]:
    """Decoded entries validated and made ready to keep (``_kept``), or the dicts as they are
    when validation refuses them, for the engine's own validation to refuse the turn."""
    try:
        return _ready_to_keep(_ENTRIES.validate_python(loaded))
    except ValidationError:
        return loaded


def _ready_to_keep(entries: tuple[HistoryEntry, ...]) -> tuple[HistoryEntry, ...]:
    """Entries to keep in a window: with one fields set between them (a window holds 50 and
    a consumer thousands of windows: ``engine.records.share_fields_sets``), and each with the
    chat message the prompt makes of it, built in one pass (``keep_chat_messages``)."""
    share_fields_sets(entries)
    keep_chat_messages(entries)
    return entries


@dataclass(frozen=True, slots=True)
class Window:
    """A session's last entries at ``version``, and the partition its last turn came from."""

    version: int
    entries: tuple[HistoryEntry, ...]
    partition: tuple[str, int] | None


class HistoryCache:
    """At most ``max_sessions`` windows of at most ``limit`` entries each (least recently
    used dropped first). No method awaits: nothing comes between a read and its write.

    A turn takes its session's window out (``take``) and puts the next one back once its save
    committed (``extend``), so a window is kept only for sessions with no turn in flight here:
    every way a turn can end other than a committed save (a version conflict, a replay or a
    duplicate found at the save, an error of the engine or the database, a cancellation)
    leaves none behind."""

    def __init__(self, *, max_sessions: int, limit: int, decode: Decode | None = None) -> None:
        if max_sessions < 0 or limit < 0:
            raise ValueError(f"max_sessions and limit must be >= 0, got {max_sessions}, {limit}")
        self._max = max_sessions
        self._limit = limit
        self._decode = decode or decode_entries
        self._windows: OrderedDict[str, Window] = OrderedDict()

    def __len__(self) -> int:
        return len(self._windows)

    def held(self, session_id: str) -> int | None:
        """The version whose window is kept for the session, if any (for the load to send)."""
        window = self._windows.get(session_id)
        return None if window is None else window.version

    def take(
        self, session_id: str, version: int, loaded: list[dict[str, Any]] | str, held: bool
    ) -> Sequence[Any] | None:
        """The history to give the engine for a turn on the session at ``version``, the kept
        window taken out. ``held``: the load left the history out, for the kept window is of
        this version; None when it no longer is (another turn here took it meanwhile): load
        again, without it. Otherwise the ``loaded`` history as entries (a tuple, which
        ``extend`` takes), or the loaded dicts as they are when nothing is kept (disabled, or
        an entry the engine would refuse: its own validation reports it as it always did).
        ``loaded`` may be the history as the database's JSON text (``entries_of_text``)."""
        window = self._windows.pop(session_id, None)
        if held:
            return window.entries if window is not None and window.version == version else None
        if not self._max:
            return self._decode(loaded) if isinstance(loaded, str) else loaded
        if isinstance(loaded, str):
            return entries_of_text(loaded, self._decode)
        return _entries_or_dicts(loaded)

    def extend(
        self,
        session_id: str,
        version: int,
        history: Sequence[Any],
        saved_version: int,
        gave: list[dict[str, Any]] | None,
        partition: tuple[str, int] | None = None,
    ) -> None:
        """After the turn given ``history`` (what ``take`` returned for ``version``) committed
        as ``saved_version``: ``history`` followed by the entries the turn ``gave``, trimmed to
        the limit, is the window of ``saved_version``; kept. Nothing is kept when ``history``
        is not a taken window, the save is not the next version or the store did not return
        the entries."""
        if not self._max or type(history) is not tuple:
            return
        if gave is None or saved_version != version + 1:
            return
        try:
            added = _ready_to_keep(_ENTRIES.validate_python(gave))
        except ValidationError:
            return
        entries = history + added
        if len(entries) > self._limit:
            entries = entries[len(entries) - self._limit :]  # (a limit of 0 keeps nothing)
        self._windows[session_id] = Window(saved_version, entries, partition)
        self._windows.move_to_end(session_id)
        while len(self._windows) > self._max:
            self._windows.popitem(last=False)

    def drop_partitions(self, partitions: Iterable[tuple[str, int]]) -> int:
        """Forget the windows of sessions whose last turn came from one of ``partitions`` (they
        were revoked: another consumer serves those sessions now); return how many."""
        gone = set(partitions)
        doomed = [s for s, w in self._windows.items() if w.partition in gone]
        for session_id in doomed:
            del self._windows[session_id]
        return len(doomed)
