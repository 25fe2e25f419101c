"""The history windows of recently served conversations, kept between their turns.

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

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from engine import HistoryEntry
from engine.prompt import keep_chat_messages
from engine.records import share_fields_sets
from store.history import history_entries

__all__ = ["HistoryCache", "Window", "entries_of_text"]

_ENTRIES: TypeAdapter[tuple[HistoryEntry, ...]] = TypeAdapter(tuple[HistoryEntry, ...])


def entries_of_text(text: str) -> tuple[HistoryEntry, ...] | list[dict[str, Any]]:
    """A loaded history, given as the JSON text the database sent, as the engine's entries.

    Validated straight from the text in one pass: a cold load's 50 entries cost about half
    what decoding them into dicts (``store.history.history_entries``) and validating those
    did. pydantic reads an entry's ``at`` the way it reads an ISO 8601 datetime, which is
    stricter than ``datetime.fromisoformat`` (the decoder's): a value only the latter reads
    (``20261203T1000``, a week date) is refused here, so whatever this refuses is given the
    decoder's way, exactly as before: as entries when they validate, else as the dicts, for
    the engine's own validation to refuse the turn as it always did. Where both read a value
    they read the same instant (tests/consumer/test_history_text.py)."""
    try:
        return _kept(_ENTRIES.validate_json(text))
    except ValidationError:
        return _entries_or_dicts(history_entries(text))


def _entries_or_dicts(loaded: list[dict[str, Any]]) -> tuple[HistoryEntry, ...] | list[Any]:
    """Decoded entries validated and made ready to keep (``_kept``), or the dicts as they are
    when validation refuses them, for the engine's own validation to refuse the turn."""
    try:
        return _kept(_ENTRIES.validate_python(loaded))
    except ValidationError:
        return loaded


def _kept(entries: tuple[HistoryEntry, ...]) -> tuple[HistoryEntry, ...]:
    """Entries to keep in a window: with one fields set between them (a window holds 50 and
    a consumer thousands of windows: ``engine.records.share_fields_sets``), and each with the
    chat message the prompt makes of it, built in one pass (``engine.prompt``)."""
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

    def __init__(self, *, max_sessions: int, limit: int) -> None:
        if max_sessions < 0 or limit < 0:
            raise ValueError(f"max_sessions and limit must be >= 0, got {max_sessions}, {limit}")
        self._max = max_sessions
        self._limit = limit
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
            return history_entries(loaded) if isinstance(loaded, str) else loaded
        if isinstance(loaded, str):
            return entries_of_text(loaded)
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
            added = _kept(_ENTRIES.validate_python(gave))
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
