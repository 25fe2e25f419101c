"""In-memory doubles of the store, the producer and the Kafka consumer for consumer unit tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.structs import ConsumerRecord, TopicPartition

from store import (
    AlreadyApplied,
    DeadLetterRecord,
    DuplicateInput,
    LoadedSession,
    LoadRequest,
    OutboxRow,
    SavedTurn,
    SaveRequest,
    SourceRecord,
    VersionConflict,
)


class FakeBatch:
    def __init__(self, store: FakeStore, rows: list[OutboxRow]) -> None:
        self._store = store
        self.rows = rows

    async def mark_published(self, ids: list[int] | None = None) -> int:
        chosen = [r.id for r in self.rows] if ids is None else list(ids)
        self._store.published.update(chosen)
        return len(chosen)


class FakeStore:
    """Sessions, a turn log keyed by source and by (session, input id), and an outbox, in
    memory."""

    def __init__(self) -> None:
        self.sessions: dict[str, tuple[dict[str, Any], int]] = {}
        self.applied: set[tuple[str, int, int]] = set()
        self.input_ids: set[tuple[str, str]] = set()
        self.rows: list[OutboxRow] = []
        self.published: set[int] = set()
        self.saves: list[SaveRequest] = []
        self.rival_writes = 0  # saves another writer sneaks in before ours
        self.calls: list[str] = []  # the store methods called, in order: the round trips
        self.kept: dict[int, DeadLetterRecord] = {}  # the dead_letters table
        self.duplicates: set[tuple[str, int, int]] = set()  # sources a load found a copy of
        self.dead_lettered: dict[tuple[str, int, int], tuple[str, str]] = {}  # -> session, reason
        self.partition_units: list[str] = []
        self.positions: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> next
        self.database_changed = False

    async def source_positions(
        self, group: str, partitions: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        return {
            (t, p): self.positions[(group, t, p)] for t, p in partitions
            if (group, t, p) in self.positions
        }

    async def save_source_positions(
        self, group: str, positions: Mapping[tuple[str, int], int]
    ) -> None:
        for (topic, partition), offset in positions.items():
            key = (group, topic, partition)
            self.positions[key] = max(offset, self.positions.get(key, -1))

    async def ensure_turn_partitions(self, *, unit: str = "month") -> list[str]:
        """No partitions to make: the turn log here is a list (the relay asks on every pass,
        in its ``TURN_PARTITION`` unit)."""
        self.partition_units.append(unit)
        return []

    async def compact_turn_search(self) -> list[str]:
        return []

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
        self.calls.append("load")
        asked_sources = list(sources) or ([source] if source is not None else [])
        asked_ids = [i for i in (list(input_ids) or [input_id]) if i]
        duplicate_ids = frozenset(i for i in asked_ids if (session_id, i) in self.input_ids)
        state, version = self.sessions.get(session_id, (None, 0))
        applied_sources = frozenset(
            s for s in asked_sources if (s.topic, s.partition, s.offset) in self.applied
            or (s.topic, s.partition, s.offset) in self.dead_lettered
        )
        unpublished = sum(
            1 for r in self.rows if r.session_id == session_id and r.id not in self.published
        )
        if asked_ids and len(duplicate_ids) == len(set(asked_ids)):
            self.duplicates.update((s.topic, s.partition, s.offset) for s in asked_sources)
        return LoadedSession(
            state=state, version=version, history=[],
            applied=bool(asked_sources) and len(applied_sources) == len(set(asked_sources)),
            unpublished=unpublished,
            duplicate=bool(asked_ids) and len(duplicate_ids) == len(set(asked_ids)),
            applied_sources=applied_sources, duplicate_ids=duplicate_ids,
        )

    async def record_dead_lettered(
        self, session_id: str, sources: Sequence[SourceRecord], reason: str,
        *, words: object = None,
    ) -> None:
        self.calls.append("record_dead_lettered")
        for s in sources:
            self.dead_lettered.setdefault((s.topic, s.partition, s.offset), (session_id, reason))

    async def last_dead_lettered_offset(self, topic: str, partition: int) -> int | None:
        self.calls.append("last_dead_lettered_offset")
        offsets = [o for (t, p, o) in self.dead_lettered if (t, p) == (topic, partition)]
        return max(offsets, default=None)

    async def is_dead_lettered(self, source: SourceRecord) -> bool:
        self.calls.append("is_dead_lettered")
        return (source.topic, source.partition, source.offset) in self.dead_lettered

    async def is_applied(self, topic: str, partition: int, offset: int) -> bool:
        self.calls.append("is_applied")
        return (topic, partition, offset) in self.applied

    async def load_many(
        self,
        requests: Sequence[LoadRequest],
        *,
        history_limit: int = 20,
        history_as_text: bool = False,
    ) -> list[LoadedSession]:
        """The real store's contract: one result per request, in order (the history decoded
        whether or not asked as text: a caller takes either)."""
        return [
            await self.load(r.session_id, history_limit=history_limit, sources=r.sources,
                            input_ids=r.input_ids)
            for r in requests
        ]

    async def save_turns(self, requests: Sequence[SaveRequest]) -> list[SavedTurn | Exception]:
        """The real store's contract: each request's own outcome, errors returned."""
        results: list[SavedTurn | Exception] = []
        for request in requests:
            try:
                results.append(await self.save_turn(request))
            except Exception as error:
                results.append(error)
        return results

    async def save_turn(self, request: SaveRequest) -> SavedTurn:
        self.calls.append("save_turn")
        if self.rival_writes:
            self.rival_writes -= 1
            state, version = self.sessions.get(request.session_id, ({}, 0))
            self.sessions[request.session_id] = (state, version + 1)
        source = request.turn.source
        assert source is not None
        if (source.topic, source.partition, source.offset) in self.applied:
            raise AlreadyApplied(topic=source.topic, partition=source.partition,
                                 offset=source.offset)
        input_key = (request.session_id, request.turn.input_id or "")
        if request.turn.input_id and input_key in self.input_ids:
            raise DuplicateInput(session_id=request.session_id)
        _, version = self.sessions.get(request.session_id, (None, 0))
        if version != request.expected_version:
            raise VersionConflict(session_id=request.session_id,
                                  expected=request.expected_version, found=version)
        for earlier in request.turn.earlier:
            if earlier.input_id and (request.session_id, earlier.input_id) in self.input_ids:
                raise DuplicateInput(session_id=request.session_id)
        self.saves.append(request)
        self.applied.add((source.topic, source.partition, source.offset))
        if request.turn.input_id:
            self.input_ids.add(input_key)
        for earlier in request.turn.earlier:
            if earlier.source is not None:
                s = earlier.source
                self.applied.add((s.topic, s.partition, s.offset))
            if earlier.input_id:
                self.input_ids.add((request.session_id, earlier.input_id))
        self.sessions[request.session_id] = (request.state, version + 1)
        ids = [self.add_row(request.session_id, e.topic, e.payload,
                            traceparent=request.traceparent, tracestate=request.tracestate)
               for e in request.outbox]
        return SavedTurn(version=version + 1, outbox_ids=ids)

    def add_row(
        self, session_id: str, topic: str, payload: dict[str, Any],
        created_at: datetime | None = None, traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> int:
        row_id = len(self.rows) + 1
        self.rows.append(OutboxRow(row_id, session_id, topic, session_id, payload,
                                   created_at or datetime.now(UTC), traceparent, tracestate))
        return row_id

    @asynccontextmanager
    async def fetch_unpublished(
        self, *, session_id: str | None = None, limit: int = 100,
        older_than: timedelta | None = None,
    ) -> AsyncIterator[FakeBatch]:
        """As the real fetch: with ``older_than`` only rows at least that old, and per session
        only those with no unpublished row before them left out (a young one)."""
        self.calls.append("fetch_unpublished")
        cutoff = None if older_than is None else datetime.now(UTC) - older_than
        unpublished = [r for r in self.rows if r.id not in self.published
                       and (session_id is None or r.session_id == session_id)]
        taken = [r for r in unpublished if cutoff is None or r.created_at <= cutoff][:limit]
        chosen = {r.id for r in taken}
        rows = [r for r in taken if not any(
            o.session_id == r.session_id and o.id < r.id and o.id not in chosen
            for o in unpublished
        )]
        yield FakeBatch(self, rows)

    async def mark_published(self, ids: list[int]) -> int:
        self.calls.append("mark_published")
        fresh = set(ids) - self.published
        self.published.update(fresh)
        return len(fresh)

    async def outbox_backlog(self) -> int:
        return len(self.rows) - len(self.published)

    async def keep_dead_letter(self, letter: DeadLetterRecord) -> int:
        """Keep a record once per source, as the dead_letters table does."""
        self.calls.append("keep_dead_letter")
        for row_id, kept in self.kept.items():
            if kept.source == letter.source:
                return row_id
        row_id = len(self.kept) + 1
        self.kept[row_id] = letter
        return row_id


class FakeProducer:
    """Records what was sent, in order; every send is acknowledged at once. Like aiokafka's
    producer, it refuses a record larger than ``max_request_size`` (value, key and headers)
    with ``MessageSizeTooLargeError`` before sending it."""

    def __init__(self, max_request_size: int = 1 << 20) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.headers: list[list[tuple[str, bytes]]] = []
        self.max_request_size = max_request_size

    async def send(
        self, topic: str, value: bytes, key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> Any:
        size = len(value or b"") + len(key or b"") + sum(
            len(name.encode("utf-8")) + len(data) for name, data in headers or ()
        )
        if size > self.max_request_size:
            raise MessageSizeTooLargeError(f"The message is {size} bytes")
        self.sent.append((topic, key, value))
        self.headers.append(list(headers or ()))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def send_and_wait(
        self, topic: str, value: bytes, key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> Any:
        return await (await self.send(topic, value, key=key, headers=headers))

class FakeKafkaConsumer:
    """Just enough of AIOKafkaConsumer for the fetch loop: per-partition logs, pause/resume,
    commits; every ``getmany`` round is recorded with the partitions paused at that moment.

    Like the real client, a round returns records only of unpaused partitions, from each
    partition's position on, at most ``max_records`` in all, taking partitions in turn.

    A broker in trouble: while ``commit_gate`` is an unset event, ``commit`` waits for it
    before recording (the group coordinator out of reach; ``commit_attempts`` counts the
    calls); each error in ``fetch_errors`` is raised by one ``getmany`` round, oldest first.
    """

    def __init__(self, partitions: list[TopicPartition]) -> None:
        self.logs: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {
            tp: [] for tp in partitions
        }
        self.positions: dict[TopicPartition, int] = dict.fromkeys(partitions, 0)
        self.paused_now: set[TopicPartition] = set()
        self.ever_paused: set[TopicPartition] = set()
        self.rounds: list[tuple[frozenset[TopicPartition], dict[TopicPartition, int]]] = []
        self.commits: list[dict[TopicPartition, int]] = []
        self._arrived = asyncio.Event()
        self._turn = 0
        self.commit_gate: asyncio.Event | None = None
        self.commit_attempts = 0
        self.fetch_errors: list[BaseException] = []
        self.seeks: list[tuple[TopicPartition, int]] = []

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """No topic metadata, so the placement check (``consumer.turns.placement``) checks nothing:
        these tests place records on partitions by hand, not by key."""
        return None

    def append(self, tp: TopicPartition, key: bytes | None, value: bytes) -> int:
        """Produce one record to a partition; returns its offset."""
        log = self.logs[tp]
        log.append(ConsumerRecord(tp.topic, tp.partition, len(log), 0, 0, key, value, None,
                                  len(key or b""), len(value), []))
        self._arrived.set()
        return len(log) - 1

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        if self.fetch_errors:
            raise self.fetch_errors.pop(0)
        budget = max_records or 1 << 30
        out: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
        order = list(self.logs)
        self._turn = (self._turn + 1) % len(order)
        for tp in order[self._turn:] + order[: self._turn]:
            if tp in self.paused_now or budget == 0:
                continue
            start = self.positions[tp]
            taken = self.logs[tp][start : start + budget]
            if taken:
                out[tp] = taken
                self.positions[tp] = start + len(taken)
                budget -= len(taken)
        self.rounds.append((frozenset(self.paused_now), {tp: len(r) for tp, r in out.items()}))
        if not out:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout=timeout_ms / 1000)
        return out

    def pause(self, *partitions: TopicPartition) -> None:
        self.paused_now.update(partitions)
        self.ever_paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self.paused_now.difference_update(partitions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next round reads ``tp`` from ``offset`` (``seeks`` keeps every one made)."""
        if offset < 0:
            raise ValueError("Offset must be a positive integer")
        self.positions[tp] = offset
        self.seeks.append((tp, offset))
        self._arrived.set()

    def assignment(self) -> set[TopicPartition]:
        return set(self.logs)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commit_attempts += 1
        if self.commit_gate is not None:
            await self.commit_gate.wait()
        self.commits.append(dict(offsets))

    def highwater(self, tp: TopicPartition) -> int:
        return len(self.logs[tp])

    def committed(self, tp: TopicPartition) -> int | None:
        """The last offset committed for a partition."""
        marks = [c[tp] for c in self.commits if tp in c]
        return marks[-1] if marks else None


def fake_clients(
    consumer: Any,
    store: Any,
    producer: Any,
    pipeline: Any,
    *,
    budget: Any = None,
    dlq_topic: str = "dlq",
) -> Any:
    """The consume service's clients made of doubles (``ConsumerService(..., clients=...)``):
    dead letters go to ``dlq_topic`` through ``producer``."""
    from consumer.dead_letters import DeadLetterPublisher
    from consumer.turns.runtime import Clients

    return Clients(
        consumer=consumer, store=store, pipeline=pipeline,
        dead_letters=DeadLetterPublisher(producer, store, dlq_topic), budget=budget,
    )
