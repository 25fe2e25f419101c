"""Grouped round trips: the loads and the saves of turns that run together share one statement.

At a few hundred turns a second each load and each save is a round trip of its own — a socket
write, a wake of the event loop, on the server a statement (and for a save, a commit with its
WAL flush) — for work that takes the server a fraction of a millisecond. ``LoadGroup`` and
``SaveGroup`` send the first request at once and collect every request that arrives while a
statement is in flight into the next one (``Store.load_many``, ``Store.save_turns``), so an
idle consumer adds no wait and a busy one pays a round trip per group, not per turn.

Nothing about a turn's outcome changes: each load gets its own session, history and replay
answers; each save its own version check, outbox ids and error (``VersionConflict``,
``AlreadyApplied``, ``DuplicateInput``, or the database error), exactly as alone, and each turn
waits for its own result. A session appears at most once per save statement: a second save of
it (which the consumer never makes while the first is in flight) waits for the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from consumer.failures import cannot_succeed
from store import LoadedSession, LoadRequest, SavedTurn, SaveRequest, Store

__all__ = ["Grouped", "LoadGroup", "SaveGroup"]

MAX_GROUP = 100
"""Requests per statement at most; more wait for the next one."""

Request = TypeVar("Request")
Result = TypeVar("Result")


class Grouped(Generic[Request, Result]):
    """One statement in flight at a time; what arrives meanwhile goes in the next one.

    ``run`` takes a group's requests and gives one result (or exception) per request, in
    order; an exception it raises reaches every waiter of the group. ``max_group`` caps a group
    (None: no cap); with ``key``, requests with equal keys never share a group."""

    def __init__(
        self,
        run: Callable[[list[Request]], Awaitable[Sequence[Result | Exception]]],
        *,
        max_group: int | None,
        key: Callable[[Request], object] | None = None,
        name: str,
    ) -> None:
        if max_group is not None and max_group < 1:
            raise ValueError(f"max_group must be at least 1, got {max_group}")
        self._run = run
        self._max = max_group
        self._key = key
        self._name = name
        self._waiting: list[tuple[Request, asyncio.Future[Result]]] = []
        self._flushing: asyncio.Task[None] | None = None

    async def submit(self, request: Request) -> Result:
        done: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, done))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.create_task(self._flush(), name=self._name)
        return await done

    async def close(self) -> None:
        """Cancel the statement in flight and every request still waiting; return once the
        statement has ended. For shutdown, after the callers' tasks are cancelled and before
        the store closes: cancelling a caller leaves its group's statement running, and one
        still running when the pool is disposed holds a connection nothing closes."""
        flushing, self._flushing = self._flushing, None
        if flushing is not None and not flushing.done():
            flushing.cancel()
            await asyncio.wait([flushing])
        # A flush cancelled before its first step never ran its own cancelling of the waiters.
        for _, done in self._waiting:
            done.cancel()
        self._waiting = []

    async def _flush(self) -> None:
        while self._waiting:
            group, self._waiting = self._next_group(self._waiting)
            try:
                results = await self._run([request for request, _ in group])
            except asyncio.CancelledError:
                for _, done in [*group, *self._waiting]:
                    done.cancel()  # shutting down: no waiter is left hanging
                self._waiting = []
                raise
            except Exception as error:
                results = [error] * len(group)  # every waiter of the group hears it
            for (_, done), result in zip(group, results, strict=True):
                if done.done():
                    continue  # its turn was cancelled meanwhile
                if isinstance(result, Exception):
                    done.set_exception(result)
                else:
                    done.set_result(result)

    def _next_group(
        self, waiting: list[tuple[Request, asyncio.Future[Result]]]
    ) -> tuple[list[tuple[Request, asyncio.Future[Result]]],
               list[tuple[Request, asyncio.Future[Result]]]]:
        """The next group (oldest first, at most ``max_group``, each key once) and the rest,
        in arrival order."""
        if self._key is None:
            if self._max is None:
                return waiting, []
            return waiting[: self._max], waiting[self._max :]
        group: list[tuple[Request, asyncio.Future[Result]]] = []
        rest: list[tuple[Request, asyncio.Future[Result]]] = []
        keys: set[object] = set()
        for entry in waiting:
            key = self._key(entry[0])
            if (self._max is None or len(group) < self._max) and key not in keys:
                keys.add(key)
                group.append(entry)
            else:
                rest.append(entry)
        return group, rest


class SaveGroup:
    """Saves turns for many sessions at once (a group commit)."""

    def __init__(self, store: Store, *, max_group: int = MAX_GROUP) -> None:
        self._group: Grouped[SaveRequest, SavedTurn] = Grouped(
            store.save_turns, max_group=max_group, key=lambda r: r.session_id,
            name="group-save",
        )

    async def save(self, request: SaveRequest) -> SavedTurn:
        """Return once ``request`` is committed; raise what saving it alone would raise."""
        return await self._group.submit(request)

    async def close(self) -> None:
        """Cancel the save in flight, if any (``Grouped.close``)."""
        await self._group.close()


class LoadGroup:
    """Loads many sessions at once. An outage reaches every turn of its group (each retries);
    an error no retry can fix (one session's data the database or the decoder refuses) is
    narrowed down by loading each request of the group alone, so only the turn whose data
    it is fails: a group shares a statement, never a fate. ``history_as_text``: each
    session's history as the database's JSON text (``LoadedSession.history_json``)."""

    def __init__(
        self,
        store: Store,
        *,
        history_limit: int,
        max_group: int = MAX_GROUP,
        history_as_text: bool = False,
    ) -> None:
        async def load_many(requests: list[LoadRequest]) -> list[LoadedSession]:
            return await store.load_many(
                requests, history_limit=history_limit, history_as_text=history_as_text
            )

        async def load(requests: list[LoadRequest]) -> Sequence[LoadedSession | Exception]:
            try:
                return await load_many(requests)
            except Exception as error:
                if len(requests) == 1 or cannot_succeed(error) is None:
                    raise
            results: list[LoadedSession | Exception] = []
            for request in requests:
                try:
                    loaded = await load_many([request])
                except Exception as error:
                    results.append(error)
                else:
                    results.append(loaded[0])
            return results

        self._group: Grouped[LoadRequest, LoadedSession] = Grouped(
            load, max_group=max_group, name="group-load"
        )

    async def load(self, request: LoadRequest) -> LoadedSession:
        """The session as ``Store.load`` gives it."""
        return await self._group.submit(request)

    async def close(self) -> None:
        """Cancel the load in flight, if any (``Grouped.close``)."""
        await self._group.close()
