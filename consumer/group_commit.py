"""Group commit: the saves of turns that finish together go to the database as one statement.

At a few hundred turns a second each save is a round trip of its own — a socket write, a wake
of the event loop, a commit (and its WAL flush) on the server — for a statement that takes the
server a fraction of a millisecond. ``SaveGroup`` sends the first save at once and collects
every save that arrives while a statement is in flight into the next one (``Store.save_turns``),
so an idle consumer adds no wait and a busy one pays a round trip per group, not per turn.

Nothing about a save's outcome changes: each turn still gets its own version check, its own
outbox ids and its own error (``VersionConflict``, ``AlreadyApplied``, ``DuplicateInput``, or
the database error), exactly as if saved alone, and waits for its own result before it
publishes. A session appears at most once per statement: its second save (which the consumer
never makes while the first is in flight) waits for the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from store import SavedTurn, SaveRequest, Store

__all__ = ["SaveGroup"]

MAX_GROUP = 100
"""Saves per statement at most; more wait for the next one."""


class SaveGroup:
    """Saves turns for many sessions at once, one statement in flight at a time."""

    def __init__(self, store: Store, *, max_group: int = MAX_GROUP) -> None:
        if max_group < 1:
            raise ValueError(f"max_group must be at least 1, got {max_group}")
        self._store = store
        self._max = max_group
        self._waiting: list[tuple[SaveRequest, asyncio.Future[SavedTurn]]] = []
        self._flushing: asyncio.Task[None] | None = None

    async def save(self, request: SaveRequest) -> SavedTurn:
        """Return once ``request`` is committed; raise what saving it alone would raise."""
        done: asyncio.Future[SavedTurn] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, done))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.create_task(self._flush(), name="group-commit")
        return await done

    async def _flush(self) -> None:
        while self._waiting:
            group, self._waiting = _one_per_session(self._waiting, self._max)
            requests = [request for request, _ in group]
            try:
                results: Sequence[SavedTurn | Exception] = await self._store.save_turns(requests)
            except asyncio.CancelledError:
                for _, done in [*group, *self._waiting]:
                    done.cancel()  # shutting down: no waiter is left hanging
                self._waiting = []
                raise
            except Exception as error:
                results = [error] * len(group)  # every waiter of the group hears it
            for (_, done), result in zip(group, results, strict=True):
                if done.done():
                    continue  # its turn was cancelled; the save (if any) is in the turn log
                if isinstance(result, Exception):
                    done.set_exception(result)
                else:
                    done.set_result(result)


def _one_per_session(
    waiting: list[tuple[SaveRequest, asyncio.Future[SavedTurn]]], limit: int
) -> tuple[list[tuple[SaveRequest, asyncio.Future[SavedTurn]]],
           list[tuple[SaveRequest, asyncio.Future[SavedTurn]]]]:
    """The next group (oldest first, each session once, at most ``limit``) and the rest, in
    arrival order."""
    group: list[tuple[SaveRequest, asyncio.Future[SavedTurn]]] = []
    rest: list[tuple[SaveRequest, asyncio.Future[SavedTurn]]] = []
    sessions: set[str] = set()
    for entry in waiting:
        session = entry[0].session_id
        if len(group) < limit and session not in sessions:
            sessions.add(session)
            group.append(entry)
        else:
            rest.append(entry)
    return group, rest
