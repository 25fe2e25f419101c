"""`Store`: the service's one door to PostgreSQL.

The engine runs in autocommit mode: every single-statement operation (load, save, timers
upsert, counters) is its own implicit transaction and costs one round trip. Operations that
must hold locks while the caller does I/O (claiming timers, fetching outbox rows) open an
explicit transaction on a dedicated connection for the span of an `async with` block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from store import (
    dead_letters,
    direct,
    erasure,
    history,
    jsoncodec,
    outbox,
    partitions,
    saving,
    timers,
    turn_log,
)
from store.errors import AlreadyApplied, DuplicateInput, VersionConflict
from store.input_ids import stored_input_id
from store.outbox import OutboxBatch
from store.pooler import Pooler, engine_options
from store.positions import (
    PositionsUpdate,
    TimelineGuard,
    check_and_write,
    read_positions,
    write_positions,
)
from store.records import (
    DeadLetterRecord,
    DeadLetterWords,
    LoadedSession,
    LoadRequest,
    LoggedTurn,
    SavedTurn,
    SaveRequest,
    SourceRecord,
)
from store.timers import ClaimedTimers, TimerLike
from store.urls import async_url

# The turn log's own unique indexes are those of its first partition (turns saved before it was
# partitioned, migration 0023); newer turns are kept unique by the save statement.
_SOURCE_INDEX = "uq_turns_source"
_INPUT_INDEX = "uq_turns_input"
_EARLIER_SOURCE_INDEX = "uq_turn_sources_source"
_EARLIER_INPUT_INDEX = "uq_turn_sources_input"
# A turn's charge is keyed by its input: the same input billed again is a duplicate.
_CHARGE_INDEX = "uq_credit_ledger_charge"
_PING = text("SELECT 1")
_VERSION = text("SELECT version FROM sessions WHERE id = :session_id")
_APPLIED = text(
    "SELECT EXISTS (SELECT 1 FROM turns WHERE source_topic = :topic"
    " AND source_partition = :partition AND source_offset = :offset)"
    " OR EXISTS (SELECT 1 FROM turn_sources WHERE source_topic = :topic"
    " AND source_partition = :partition AND source_offset = :offset)"
)
_DEAD_LETTERED = text(
    "INSERT INTO dead_lettered_sources"
    " (session_id, source_topic, source_partition, source_offset, reason, message, input_id,"
    " record_key, detail)"
    " VALUES (:session_id, :topic, :partition, :offset, :reason, :message, :input_id,"
    " :record_key, :detail)"
    " ON CONFLICT (source_topic, source_partition, source_offset) DO NOTHING"
)

_HAS_INPUT = text(
    "SELECT EXISTS (SELECT 1 FROM turns WHERE session_id = :session_id AND input_id = :input_id)"
)

_LAST_DEAD_LETTERED = text(
    "SELECT max(source_offset) FROM dead_lettered_sources"
    " WHERE source_topic = :topic AND source_partition = :partition"
)
_IS_DEAD_LETTERED = text(
    "SELECT EXISTS (SELECT 1 FROM dead_lettered_sources WHERE source_topic = :topic"
    " AND source_partition = :partition AND source_offset = :offset)"
)


def _loaded(request: LoadRequest, row: Any, history_as_text: bool = False) -> LoadedSession:
    """One row of the load statement as the turn's `LoadedSession`; with `history_as_text`,
    its history as the database's JSON text (`history_json`), not decoded."""
    asked_sources, asked_ids = request.sources, request.input_ids
    applied_sources = frozenset(asked_sources[n - 1] for n in row["applied"] or ())
    duplicate_ids = frozenset(asked_ids[n - 1] for n in row["duplicate"] or ())
    found = LoadedSession(
        state=None,
        version=0,
        history=[],
        applied=bool(asked_sources) and len(applied_sources) == len(set(asked_sources)),
        duplicate=bool(asked_ids) and len(duplicate_ids) == len(set(asked_ids)),
        applied_sources=applied_sources,
        duplicate_ids=duplicate_ids,
        unpublished=int(row["unpublished"]),
    )
    if row["version"] is None:
        return found
    held = row["history"] is None  # at the version the caller holds the history for
    as_text = history_as_text and not held
    return dataclasses.replace(
        found,
        state=jsoncodec.loads(row["state"]),
        version=int(row["version"]),
        history=[] if held or as_text else history.history_entries(row["history"]),
        history_held=held,
        history_json=row["history"] if as_text else None,
    )


async def _outcome(call: Awaitable[Any]) -> Any:
    """What ``call`` returns, or the exception it raised (returned, not raised)."""
    try:
        return await call
    except Exception as error:
        return error


class Store:
    """Sessions, the turn log, the outbox and timers. Build with `await Store.connect(url)`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._guard: TimelineGuard | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        max_overflow: int = 10,
        pool_timeout_s: float = 30.0,
        pool_recycle_s: float = 1800.0,
        command_timeout_s: float = 30.0,
        application_name: str = "turnflow",
        guard_timeline: bool = False,
        pooler: Pooler = "none",
    ) -> Store:
        """Open a pool on `url` (plain `postgresql://` works, several hosts too) and check one
        connection. ``guard_timeline``: bind the pool to the database timeline that connection
        finds and refuse connections to another (``store.positions.TimelineGuard``): for a
        process that keeps what it saved in memory, so it never carries that past a
        failover. ``pooler="transaction"``: ``url`` is a pooler in transaction mode
        (store/pooler.py)."""
        engine = create_async_engine(
            async_url(url),
            isolation_level="AUTOCOMMIT",
            # jsonb columns come back decoded by the driver's codec: through pydantic-core's
            # parser (it reads what jsonb holds exactly as the standard library does, in about
            # two thirds of the time) rather than the dialect's default `json.loads`.
            json_deserializer=jsoncodec.loads,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_timeout=pool_timeout_s,
            pool_recycle=pool_recycle_s,
            **engine_options(pooler, {
                "command_timeout": command_timeout_s,
                "server_settings": {"application_name": application_name},
            }),
        )
        guard = TimelineGuard(engine) if guard_timeline else None
        try:
            async with engine.connect() as connection:
                await connection.execute(_PING)
        except BaseException:
            await engine.dispose()
            raise
        store = cls(engine)
        store._guard = guard
        return store

    @property
    def timeline(self) -> str | None:
        """The timeline a guarded store is bound to (hexadecimal, as in WAL file names), None
        before its first connection or when it is not guarded."""
        return None if self._guard is None else self._guard.timeline

    @property
    def database_changed(self) -> bool:
        """True once a guarded store found the database on another timeline (a promotion):
        its connections are refused from then on and the process should restart."""
        return self._guard is not None and self._guard.changed

    async def source_positions(
        self, group: str, partitions: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """Where ``group`` is in each of ``partitions`` by the database (store/positions.py)."""
        return await read_positions(self._engine, group, partitions)

    async def save_source_positions(
        self, group: str, positions: Mapping[tuple[str, int], int]
    ) -> None:
        """Move ``group``'s stored positions forward; only offsets whose work below is
        committed in this database (store/positions.py)."""
        await write_positions(self._engine, group, positions)

    @property
    def engine(self) -> AsyncEngine:
        """The pooled SQLAlchemy engine (autocommit), for health checks and instrumentation."""
        return self._engine

    async def close(self) -> None:
        """Close every pooled connection."""
        await self._engine.dispose()

    async def _scalar(self, sql: TextClause, parameters: dict[str, Any] | None = None) -> Any:
        async with self._engine.connect() as connection:
            result = await connection.execute(sql, parameters or {})
            return result.scalar()

    # -- sessions and the turn log ----------------------------------------------------------

    async def load(
        self,
        session_id: str,
        *,
        history_limit: int = 20,
        source: SourceRecord | None = None,
        input_id: str | None = None,
        sources: Sequence[SourceRecord] = (),
        input_ids: Sequence[str] = (),
    ) -> LoadedSession:
        """The session's state and version (None/0 when new), its last history entries, how
        many of its outbox rows are unpublished, which of the turn's source records (`source`,
        or `sources` for a burst) are already in the turn log and which of its input ids
        (`input_id`, or `input_ids`) the session already had — one statement, one round trip."""
        asked = LoadRequest(
            session_id,
            sources=tuple(sources) or ((source,) if source is not None else ()),
            input_ids=tuple(i for i in (*input_ids, *([] if input_ids else [input_id])) if i),
        )
        return (await self.load_many([asked], history_limit=history_limit))[0]

    async def load_many(
        self,
        requests: Sequence[LoadRequest],
        *,
        history_limit: int = 20,
        history_as_text: bool = False,
    ) -> list[LoadedSession]:
        """`load` for several sessions in one statement (the consumer groups the loads of turns
        that start together); one result per request, in order. With `history_as_text`, each
        session's history is left as the JSON text the database sent (`history_json`), for a
        caller that validates it straight from the text."""
        if not requests:
            return []
        parameters = {
            "session_ids": [r.session_id for r in requests],
            "sources": [
                jsoncodec.dumps(
                    [{"topic": s.topic, "part": s.partition, "off": s.offset} for s in r.sources]
                )
                for r in requests
            ],
            "input_ids": [
                jsoncodec.dumps([stored_input_id(i) for i in r.input_ids]) for r in requests
            ],
            "history_versions": [r.history_version for r in requests],
            "history_limit": history_limit,
        }
        rows = await direct.fetch(self._engine, history.LOAD, parameters)
        return [
            _loaded(request, row, history_as_text)
            for request, row in zip(requests, rows, strict=True)
        ]

    async def save_turn(self, request: SaveRequest) -> SavedTurn:
        """Write the session, its turn-log row and its outbox rows atomically (one round trip).

        Raises `VersionConflict` when the session is no longer at `expected_version`,
        `AlreadyApplied` when the turn's source record is already in the log and
        `DuplicateInput` when the session already has a turn for the turn's `input_id`; in
        every case nothing was written.
        """
        statement = saving.save_statement(request)
        parameters = saving.save_parameters(request)
        try:
            row = await direct.fetchrow(self._engine, statement, parameters)
        except IntegrityError as exc:
            source = request.turn.source
            if source is not None and _SOURCE_INDEX in str(exc.orig):
                raise AlreadyApplied(
                    topic=source.topic, partition=source.partition, offset=source.offset
                ) from None
            if any(
                index in str(exc.orig)
                for index in (_INPUT_INDEX, _EARLIER_INPUT_INDEX, _CHARGE_INDEX)
            ):
                raise DuplicateInput(session_id=request.session_id) from None
            if _EARLIER_SOURCE_INDEX in str(exc.orig):
                first = next(e.source for e in request.turn.earlier if e.source is not None)
                raise AlreadyApplied(
                    topic=first.topic, partition=first.partition, offset=first.offset
                ) from None
            raise
        assert row is not None  # the statement always returns its one row
        if row["version"] is None:
            await self._raise_conflict(request)
        return SavedTurn(
            version=int(row["version"]),
            outbox_ids=[int(i) for i in row["outbox_ids"]],
            history=history.history_entries(row["history"]),
        )

    async def save_turns(self, requests: Sequence[SaveRequest]) -> list[SavedTurn | Exception]:
        """Save several sessions' turns in one statement (a group commit). For each request, in
        order: its `SavedTurn`, or the error `save_turn` raises for it alone (`VersionConflict`,
        `AlreadyApplied`, `DuplicateInput`, or a database error), returned, not raised.

        Each session may appear once. Every save keeps its own version check: one that fails
        writes nothing and the others commit. When the statement fails as a whole (a replay or a
        duplicate input among them aborts it on a unique index; or any other error), each
        request goes through `save_turn` alone, so each gets exactly its own outcome.
        """
        if len(requests) <= 1:
            return [await _outcome(self.save_turn(request)) for request in requests]
        try:
            parameters = saving.save_many_parameters(requests)
            rows = await direct.fetch(self._engine, saving.SAVE_MANY, parameters)
        except Exception:
            return [await _outcome(self.save_turn(request)) for request in requests]
        results: list[SavedTurn | Exception] = []
        for request, row in zip(requests, rows, strict=True):
            if row["version"] is None:
                # Wrote nothing: the explanation `save_turn` would raise (it always raises).
                results.append(await _outcome(self._raise_conflict(request)))
            else:
                ids = [int(i) for i in row["outbox_ids"]]
                entries = history.history_entries(row["history"])
                results.append(
                    SavedTurn(version=int(row["version"]), outbox_ids=ids, history=entries)
                )
        return results

    async def _raise_conflict(self, request: SaveRequest) -> None:
        """Explain a save that wrote nothing: a replayed record, an input the session already
        had, or a lost race."""
        source = request.turn.source
        if source is not None and await self.is_applied(
            source.topic, source.partition, source.offset
        ):
            raise AlreadyApplied(
                topic=source.topic, partition=source.partition, offset=source.offset
            )
        input_id = stored_input_id(request.turn.input_id)
        if input_id is not None and await self._scalar(
            _HAS_INPUT, {"session_id": request.session_id, "input_id": input_id}
        ):
            raise DuplicateInput(session_id=request.session_id)
        found = await self._scalar(_VERSION, {"session_id": request.session_id})
        raise VersionConflict(
            session_id=request.session_id,
            expected=request.expected_version,
            found=None if found is None else int(found),
        )

    async def is_applied(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the record at topic/partition/offset is already in the turn log."""
        found = await self._scalar(
            _APPLIED, {"topic": topic, "partition": partition, "offset": offset}
        )
        return bool(found)

    # -- reading the turn log back (replays) and pruning recordings --------------------------

    async def logged_session_ids(
        self, *, since: datetime | None = None, until: datetime | None = None
    ) -> list[str]:
        """Ids of the sessions with a turn in [since, until) (either bound optional), sorted."""
        async with self._engine.connect() as connection:
            result = await connection.execute(
                turn_log.SESSIONS_IN_WINDOW, {"since": since, "until": until}
            )
            return [str(row[0]) for row in result.all()]

    async def logged_turns(self, session_ids: Sequence[str]) -> list[LoggedTurn]:
        """Every turn-log row of these sessions, by session id then version."""
        if not session_ids:
            return []
        async with self._engine.connect() as connection:
            result = await connection.execute(
                turn_log.TURNS_OF_SESSIONS, {"session_ids": list(session_ids)}
            )
            return turn_log.logged_turns(list(result.all()))

    async def prune_recordings(self, *, older_than: timedelta, batch: int = 5000) -> int:
        """Drop the model recordings of turns older than `older_than` (database clock), in
        batches so no statement holds many row locks; returns how many were dropped. They are
        deleted from ``turn_recordings``; a turn saved before that table kept its recording in
        its own row, which is cleared."""
        own = await self._in_batches(turn_log.PRUNE_RECORDINGS, older_than, batch)
        return own + await self._in_batches(turn_log.PRUNE_ROW_RECORDINGS, older_than, batch)

    async def _in_batches(self, statement: TextClause, older_than: timedelta, batch: int) -> int:
        """Run a retention statement (``:older_than_s``, ``:limit``) until a batch comes back
        short, each batch its own transaction; returns the rows it changed in all."""
        total = 0
        while True:
            async with self._engine.connect() as connection:
                result = await connection.execute(
                    statement, {"older_than_s": older_than.total_seconds(), "limit": batch}
                )
            total += int(result.rowcount)
            if result.rowcount < batch:
                return total

    # -- the turn log's partitions ---------------------------------------------------------

    async def ensure_turn_partitions(
        self, *, unit: partitions.Unit = "month", months: int | None = None
    ) -> list[str]:
        """Make the turn log's partitions of this period and the next ones (those missing;
        ``months`` of them for a monthly log, else ``partitions.AHEAD``), by month or by day;
        their names (store/partitions.py)."""
        return await partitions.ensure_ahead(self._engine, unit=unit, months=months)

    async def drop_expired_turns(self, *, older_than: timedelta) -> partitions.Dropped:
        """Drop the turn log's partitions wholly older than ``older_than``, then what is left of
        them: burst sources and sessions with no turn and nothing in progress."""
        return await partitions.drop_expired(self._engine, older_than=older_than)

    async def compact_turn_search(self) -> list[str]:
        """Rebuild once the search index of each month that has ended, at its compact size."""
        return await partitions.compact_closed(self._engine)

    # -- erasure ----------------------------------------------------------------------------

    async def erase(
        self, *, session_id: str | None = None, customer: str | None = None
    ) -> erasure.Erasure:
        """Remove one conversation (``session_id``) or a customer's (``customer``) from every
        table, in one transaction (store/erasure.py); ValueError for an id no row can hold."""
        return await erasure.erase(self._engine, session_id=session_id, customer=customer)

    async def erased_among(self, session_ids: Sequence[str]) -> dict[str, datetime]:
        """Which of ``session_ids`` were erased, and when."""
        return await erasure.erased_among(self._engine, list(session_ids))

    # -- outbox -----------------------------------------------------------------------------

    @asynccontextmanager
    async def fetch_unpublished(
        self,
        *,
        session_id: str | None = None,
        limit: int = 100,
        older_than: timedelta | None = None,
    ) -> AsyncIterator[OutboxBatch]:
        """Lock up to `limit` unpublished rows, oldest first, in per-session order; with
        `older_than` (the relay's, across sessions), only rows written longer ago than that by
        the database clock, and per session only those before its first younger row.

        Use as `async with store.fetch_unpublished(...) as batch:`, publish `batch.rows` and
        `await batch.mark_published()`; the marks commit when the block exits normally and
        roll back (rows stay unpublished) when it raises.
        """
        if session_id is not None and older_than is not None:
            raise ValueError("fetch_unpublished takes session_id or older_than, not both")
        async with self._engine.connect() as connection:
            connection = await connection.execution_options(isolation_level="READ COMMITTED")
            async with connection.begin():
                parameters: dict[str, Any] = {"limit": limit}
                statement = outbox.FETCH_UNPUBLISHED
                if session_id is not None:
                    statement = outbox.FETCH_SESSION_UNPUBLISHED
                    parameters["session_id"] = session_id
                elif older_than is not None:
                    statement = outbox.FETCH_OLD_UNPUBLISHED
                    parameters["older_than_s"] = older_than.total_seconds()
                result = await connection.execute(statement, parameters)
                yield OutboxBatch(connection, outbox.outbox_rows(result.all()))

    async def mark_published(self, ids: Sequence[int]) -> int:
        """Mark outbox rows published outside a fetch; returns how many changed."""
        if not ids:
            return 0
        return await direct.execute(self._engine, outbox.MARK_PUBLISHED_DIRECT, {"ids": list(ids)})

    async def outbox_backlog(self) -> int:
        """How many outbox rows are waiting to be published."""
        return int(await self._scalar(outbox.BACKLOG))

    async def delete_published(self, *, older_than: timedelta, batch: int = 5000) -> int:
        """Drop rows published more than `older_than` ago (database clock), in batches so no
        statement holds many row locks; returns how many.

        Published rows only serve audits of delivery; the turn log keeps what was said.
        Unpublished rows are never dropped, however old.
        """
        return await self._in_batches(outbox.DELETE_PUBLISHED, older_than, batch)

    # -- timers -----------------------------------------------------------------------------

    async def upsert_timers(
        self, entries: Iterable[TimerLike], *, positions: PositionsUpdate | None = None
    ) -> None:
        """Set timers in order, each `replaces` deleting its key first; one transaction.
        ``positions`` (group, expected, new): move the group's stored positions in the same
        transaction, after checking they are where expected (``PositionsMoved`` if not, and
        then nothing is written)."""
        deleted, upserts = timers.fold(entries)
        if positions is None:
            if not deleted and not upserts:
                return
            async with self._engine.connect() as connection:
                await connection.execute(
                    timers.UPSERT, timers.upsert_parameters(deleted, upserts)
                )
            return
        group, expected, new = positions
        async with self._engine.connect() as autocommit:
            # The pool's connections commit each statement; these two commit together.
            connection = await autocommit.execution_options(isolation_level="READ COMMITTED")
            async with connection.begin():
                await check_and_write(connection, group, expected, new)
                if deleted or upserts:
                    await connection.execute(
                        timers.UPSERT, timers.upsert_parameters(deleted, upserts)
                    )

    async def delete_timers(self, ids: Sequence[tuple[str, str]]) -> int:
        """Delete timers by (session id, key); returns how many existed."""
        if not ids:
            return 0
        async with self._engine.connect() as connection:
            result = await connection.execute(timers.DELETE, timers.pairs_parameters(ids))
            return int(result.rowcount)

    @asynccontextmanager
    async def claim_due(self, limit: int = 100) -> AsyncIterator[ClaimedTimers]:
        """Lock up to `limit` timers due by the database clock, earliest first.

        Use as `async with store.claim_due(n) as batch:`, produce the wakes for
        `batch.timers`, then `await batch.delete()`. Other claimers skip these rows until the
        block exits; deletes commit on normal exit and roll back when the block raises.
        """
        async with self._engine.connect() as connection:
            connection = await connection.execution_options(isolation_level="READ COMMITTED")
            async with connection.begin():
                result = await connection.execute(timers.CLAIM_DUE, {"limit": limit})
                db_now, claimed = timers.claimed(result.all())
                yield ClaimedTimers(connection, db_now, claimed)

    async def next_due_in(self) -> float | None:
        """Seconds until the earliest timer by the database clock (0 if overdue), or None."""
        seconds = await self._scalar(timers.NEXT_DUE_IN)
        return None if seconds is None else max(0.0, float(seconds))

    async def timers_pending(self) -> int:
        """How many timers are set."""
        return int(await self._scalar(timers.PENDING))

    # -- dead letters -----------------------------------------------------------------------

    async def keep_dead_letter(self, letter: DeadLetterRecord) -> int:
        """Keep a record that cannot travel whole; its row id (the same id for the same
        `source` kept again)."""
        async with self._engine.connect() as connection:
            result = await connection.execute(
                dead_letters.KEEP, dead_letters.keep_parameters(letter)
            )
            return int(result.scalar_one())

    async def record_dead_lettered(
        self, session_id: str, sources: Sequence[SourceRecord], reason: str,
        *, words: DeadLetterWords | None = None,
    ) -> None:
        """Remember that these source records went to the dead-letter topic, so a replay of any
        of them is skipped like an applied one (idempotent). ``session_id`` is the
        conversation's, or ``""`` for a refused record that names none; ``words``, what the
        record said about its customer (shown by the inspector)."""
        if not sources:
            return
        kept = words or DeadLetterWords()
        async with self._engine.begin() as connection:
            await connection.execute(_DEAD_LETTERED, [
                {"session_id": session_id, "topic": s.topic, "partition": s.partition,
                 "offset": s.offset, "reason": reason, "message": kept.message,
                 "input_id": kept.input_id, "record_key": kept.key, "detail": kept.detail}
                for s in sources
            ])

    async def last_dead_lettered_offset(self, topic: str, partition: int) -> int | None:
        """The highest offset of ``topic``/``partition`` stored as dead-lettered, or None: a
        record past it cannot have been dead-lettered, so it needs no lookup."""
        value = await self._scalar(
            _LAST_DEAD_LETTERED, {"topic": topic, "partition": partition}
        )
        return None if value is None else int(value)

    async def is_dead_lettered(self, source: SourceRecord) -> bool:
        """Whether ``source`` was stored as dead-lettered (by ``record_dead_lettered``)."""
        return bool(await self._scalar(
            _IS_DEAD_LETTERED,
            {"topic": source.topic, "partition": source.partition, "offset": source.offset},
        ))

    async def prune_dead_letters(
        self, *, older_than: timedelta, batch: int = 5000
    ) -> tuple[int, int]:
        """Delete kept dead letters and dead-lettered sources stored longer ago than
        `older_than` (database clock), oldest first and in batches; returns how many of each."""
        kept = await self._in_batches(dead_letters.PRUNE_KEPT, older_than, batch)
        sources = await self._in_batches(dead_letters.PRUNE_SOURCES, older_than, batch)
        return kept, sources

    async def dead_letter(self, row_id: int) -> DeadLetterRecord | None:
        """The record kept under `row_id`, or None."""
        async with self._engine.connect() as connection:
            row = (await connection.execute(dead_letters.READ, {"id": row_id})).first()
        return None if row is None else dead_letters.decode(row)
