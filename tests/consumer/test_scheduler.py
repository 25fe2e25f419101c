"""The scheduler's pieces with in-memory doubles: parsing, intake ordering, firing ordering."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError, MessageSizeTooLargeError
from asyncpg.exceptions import UntranslatableCharacterError
from sqlalchemy.exc import DBAPIError

from consumer import metrics
from consumer.errors import ScheduleRecordError
from consumer.scheduler.intake import ScheduleIntake, parse_schedule_record
from consumer.scheduler.service import FiringOptions, TimerFiring, wake_record
from store import DeadLetterRecord, Timer, TimerEntry

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


# --- doubles ---------------------------------------------------------------------------------


@dataclass
class FakeClaim:
    timers: list[Timer]
    db_now: datetime
    deleted: list[tuple[str, str]] | None = None

    async def delete(self, ids: Sequence[tuple[str, str]] | None = None) -> int:
        self.deleted = [(t.session_id, t.key) for t in self.timers] if ids is None else list(ids)
        return len(self.deleted)


@dataclass
class FakeTimerStore:
    """Timers in a dict by (session id, key), as the store keeps them; ``now`` plays the
    database clock; claims lock rows until they end."""

    now: datetime = T0
    rows: dict[tuple[str, str], TimerEntry] = field(default_factory=dict)
    locked: set[tuple[str, str]] = field(default_factory=set)
    events: list[str] = field(default_factory=list)
    fail_upsert: bool = False
    unstorable: str = ""  # entries whose key contains this fail as PostgreSQL would
    kept: list[DeadLetterRecord] = field(default_factory=list)

    def keys(self) -> list[str]:
        """The stored timers' keys, in insertion order."""
        return [key for _, key in self.rows]

    async def upsert_timers(self, entries: Sequence[TimerEntry]) -> None:
        if self.fail_upsert:
            raise ConnectionError("database down")
        if self.unstorable and any(self.unstorable in e.key for e in entries):
            raise DBAPIError("INSERT ...", {}, UntranslatableCharacterError("'k'"))  # type: ignore[arg-type]
        for entry in entries:
            if entry.replaces:
                self.rows.pop((entry.session_id, entry.replaces), None)
            self.rows[(entry.session_id, entry.key)] = entry
        self.events.append(f"upsert {[e.key for e in entries]}")

    @asynccontextmanager
    async def claim_due(self, limit: int) -> AsyncIterator[FakeClaim]:
        due = sorted(
            (
                t
                for t in self.rows.values()
                if t.at <= self.now and (t.session_id, t.key) not in self.locked
            ),
            key=lambda t: t.at,
        )[:limit]
        ids = [(t.session_id, t.key) for t in due]
        claim = FakeClaim(
            timers=[Timer(key=t.key, session_id=t.session_id, at=t.at,
                          traceparent=t.traceparent, tracestate=t.tracestate) for t in due],
            db_now=self.now,
        )
        self.locked.update(ids)
        try:
            yield claim
            if claim.deleted is not None:
                for timer_id in claim.deleted:
                    del self.rows[timer_id]
                self.events.append(f"commit {[key for _, key in claim.deleted]}")
        finally:
            self.locked.difference_update(ids)

    async def next_due_in(self) -> float | None:
        if not self.rows:
            return None
        return (min(t.at for t in self.rows.values()) - self.now).total_seconds()

    async def timers_pending(self) -> int:
        return len(self.rows)

    async def keep_dead_letter(self, letter: DeadLetterRecord) -> int:
        self.kept.append(letter)
        self.events.append(f"kept {letter.reason}")
        return len(self.kept)


@dataclass
class FakeProducer:
    """Records sends; a session id in ``fail_for`` gets its ack failed; a value over
    ``max_request_size`` is refused before sending, as aiokafka's producer does."""

    sent: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    fail_for: set[str] = field(default_factory=set)
    events: list[str] | None = None
    failed: int = 0
    max_request_size: int = 1 << 20

    async def send(self, topic: str, value: bytes, *, key: bytes) -> asyncio.Future[Any]:
        if len(value) + len(key) > self.max_request_size:
            raise MessageSizeTooLargeError(f"The message is {len(value)} bytes")
        ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if key.decode() in self.fail_for:
            self.failed += 1
            ack.set_exception(ConnectionError("broker down"))
        else:
            self.sent.append((topic, key, value))
            if self.events is not None:
                self.events.append(f"ack {json.loads(value)['wake']}")
            ack.set_result(None)
        return ack


@dataclass
class FakeRecord:
    offset: int
    value: bytes | None


@dataclass
class FakeConsumer:
    """Serves scripted batches from ``getmany``; records commits and seeks."""

    batches: list[dict[TopicPartition, list[FakeRecord]]]
    committed: list[dict[TopicPartition, int]] = field(default_factory=list)
    seeks: list[tuple[TopicPartition, int]] = field(default_factory=list)
    events: list[str] | None = None

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Any:
        return self.batches.pop(0) if self.batches else {}

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.committed.append(dict(offsets))
        if self.events is not None:
            self.events.append("offsets")

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self.seeks.append((partition, offset))


def timer(
    session_id: str, key: str, at: datetime, replaces: str | None = None
) -> TimerEntry:
    return TimerEntry(key=key, session_id=session_id, at=at, replaces=replaces)


def entry(
    key: str, *, session: str = "s1", at: datetime = T0, replaces: str | None = None
) -> bytes:
    return json.dumps(
        {"session_id": session, "key": key, "at": at.isoformat(), "replaces": replaces}
    ).encode()


def make_intake(consumer: FakeConsumer, store: FakeTimerStore, pokes: list[int]) -> ScheduleIntake:
    return ScheduleIntake(
        consumer=consumer,
        topic="outbound.schedule",
        sink=store,
        on_stored=lambda: pokes.append(1),
    )


def make_firing(store: FakeTimerStore, producer: FakeProducer, **options: Any) -> TimerFiring:
    return TimerFiring(
        store=store,
        producer=producer,
        topic="inbound.turns",
        options=FiringOptions(**options),
    )


async def eventually(condition: Callable[[], bool]) -> None:
    """Yield to the loop under test until ``condition()`` holds; a bound, not a timing claim."""
    async with asyncio.timeout(30):
        # The conditions read plain attributes of doubles; an Event would mean adding one to
        # the production code only for tests.
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


P0 = TopicPartition("outbound.schedule", 0)
P1 = TopicPartition("outbound.schedule", 1)


# --- parsing ---------------------------------------------------------------------------------


def test_parse_reads_an_entry_with_aware_utc_time() -> None:
    """A record value becomes a TimerEntry whose time is aware UTC, whatever offset it had."""
    value = b'{"session_id":"s1","key":"k1","at":"2026-01-05T10:00:00+01:00","replaces":"k0"}'
    parsed = parse_schedule_record(value)
    assert parsed == TimerEntry(session_id="s1", key="k1", at=T0, replaces="k0")
    assert parsed.at.tzinfo is UTC


def test_parse_accepts_z_suffix_and_missing_replaces() -> None:
    """`Z` times parse, and an entry without `replaces` replaces nothing."""
    parsed = parse_schedule_record(b'{"session_id":"s1","key":"k1","at":"2026-01-05T09:00:00Z"}')
    assert parsed.at == T0
    assert parsed.replaces is None


def test_parse_treats_naive_time_as_utc() -> None:
    """A time without an offset is taken as UTC, the only zone the engine writes."""
    parsed = parse_schedule_record(b'{"session_id":"s1","key":"k1","at":"2026-01-05T09:00:00"}')
    assert parsed.at == T0


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"key":"k1","at":"2026-01-05T09:00:00Z"}',
        b'{"session_id":"","key":"k1","at":"2026-01-05T09:00:00Z"}',
        b'{"session_id":"s1","at":"2026-01-05T09:00:00Z"}',
        b'{"session_id":"s1","key":7,"at":"2026-01-05T09:00:00Z"}',
        b'{"session_id":"s1","key":"k1"}',
        b'{"session_id":"s1","key":"k1","at":"tomorrow"}',
        b'{"session_id":"s1","key":"k1","at":1767603600000}',
        b'{"session_id":"s1","key":"k1","at":"2026-01-05T09:00:00Z","replaces":3}',
        b'{"session_id":"s1","key":"k1","at":"2026-01-05T09:00:00Z","replaces":""}',
        b'{"session_id":"b-sur\\ud800sid","key":"k1","at":"2026-01-05T09:00:00Z"}',
        b'{"session_id":"s1","key":"k\\u0000","at":"2026-01-05T09:00:00Z"}',
        b'{"session_id":"s1","key":"k1","at":"2026-01-05T09:00:00Z","replaces":"\\udfff"}',
        b'{"session_id":"s1","key":"k1","at":"9999-12-31T23:00:00-05:00"}',
        b'{"session_id":"s1","key":"k1","at":"0001-01-01T00:30:00+01:00"}',
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
def test_parse_rejects_malformed_records(value: bytes | None) -> None:
    """Anything but a JSON object with session_id, key, ISO at and optional replaces is refused
    with a ScheduleRecordError (never another error): text the database cannot store and times
    that overflow once moved to UTC included."""
    with pytest.raises(ScheduleRecordError) as caught:
        parse_schedule_record(value)
    assert caught.value.reason in (
        "empty", "not-json", "not-an-object", "invalid-text", "invalid-field"
    )


# --- intake ----------------------------------------------------------------------------------


async def test_intake_stores_batch_before_committing_offsets() -> None:
    """A batch is stored in one call, in offset order, and only then are its offsets committed."""
    events: list[str] = []
    store = FakeTimerStore(events=events)
    consumer = FakeConsumer(
        batches=[{P0: [FakeRecord(4, entry("a")), FakeRecord(5, entry("b"))],
                  P1: [FakeRecord(9, entry("c", session="s2"))]}],
        events=events,
    )
    pokes: list[int] = []
    stored = await make_intake(consumer, store, pokes).step()
    assert stored == 3
    assert events == ["upsert ['a', 'b', 'c']", "offsets"]
    assert consumer.committed == [{P0: 6, P1: 10}]
    assert pokes == [1]


async def test_intake_applies_replaces_within_a_batch() -> None:
    """An entry naming `replaces` removes that key when both arrive in one batch."""
    store = FakeTimerStore()
    consumer = FakeConsumer(
        batches=[{P0: [FakeRecord(0, entry("a")), FakeRecord(1, entry("b", replaces="a"))]}]
    )
    await make_intake(consumer, store, []).step()
    assert sorted(store.keys()) == ["b"]


async def test_intake_skips_malformed_record_and_commits_past_it() -> None:
    """A malformed record is skipped, the rest is stored, and the offset moves past it."""
    store = FakeTimerStore()
    consumer = FakeConsumer(
        batches=[{P0: [FakeRecord(0, b"garbage"), FakeRecord(1, entry("a"))]}]
    )
    assert await make_intake(consumer, store, []).step() == 1
    assert list(store.keys()) == ["a"]
    assert consumer.committed == [{P0: 2}]


async def test_intake_refuses_an_entry_the_database_cannot_store_and_keeps_the_rest() -> None:
    """When the batch's write fails with an error no retry can fix, the entries are written one
    by one: only the failing one is refused (logged and counted), the timers before and after
    it (other partitions' too) are stored, and the offsets move past all of them."""
    refused = metrics.SCHEDULE_REFUSED.labels(reason="unstorable-text")._value.get()
    store = FakeTimerStore(unstorable="bad")
    consumer = FakeConsumer(
        batches=[{P0: [FakeRecord(0, entry("a")), FakeRecord(1, entry("bad")),
                       FakeRecord(2, entry("b", replaces="a"))],
                  P1: [FakeRecord(5, entry("c", session="s2"))]}]
    )
    pokes: list[int] = []
    assert await make_intake(consumer, store, pokes).step() == 3
    assert sorted(e.key for e in store.rows.values()) == ["b", "c"]
    assert consumer.committed == [{P0: 3, P1: 6}] and consumer.seeks == []
    assert pokes == [1]
    assert metrics.SCHEDULE_REFUSED.labels(reason="unstorable-text")._value.get() == refused + 1


async def test_intake_commits_a_batch_of_only_malformed_records_without_poking() -> None:
    """A batch with nothing valid stores nothing, wakes nobody, and still commits its offsets."""
    store = FakeTimerStore()
    consumer = FakeConsumer(batches=[{P0: [FakeRecord(3, b"{}")]}])
    pokes: list[int] = []
    assert await make_intake(consumer, store, pokes).step() == 0
    assert consumer.committed == [{P0: 4}]
    assert pokes == []


async def test_intake_failure_to_store_commits_nothing_and_rewinds() -> None:
    """When the database write fails no offset is committed and each partition is rewound."""
    store = FakeTimerStore(fail_upsert=True)
    consumer = FakeConsumer(
        batches=[{P0: [FakeRecord(4, entry("a")), FakeRecord(5, entry("b"))],
                  P1: [FakeRecord(9, entry("c"))]}]
    )
    pokes: list[int] = []
    with pytest.raises(ConnectionError):
        await make_intake(consumer, store, pokes).step()
    assert consumer.committed == []
    assert sorted(consumer.seeks) == [(P0, 4), (P1, 9)]
    assert pokes == []


async def test_intake_counts_upserts_and_replacements() -> None:
    """The scheduled-timers counter is labelled replace for entries with `replaces`."""
    upserts = metrics.TIMERS_SCHEDULED.labels(action="upsert")._value.get()
    replaces = metrics.TIMERS_SCHEDULED.labels(action="replace")._value.get()
    consumer = FakeConsumer(
        batches=[{P0: [FakeRecord(0, entry("a")), FakeRecord(1, entry("b", replaces="a"))]}]
    )
    await make_intake(consumer, FakeTimerStore(), []).step()
    assert metrics.TIMERS_SCHEDULED.labels(action="upsert")._value.get() == upserts + 1
    assert metrics.TIMERS_SCHEDULED.labels(action="replace")._value.get() == replaces + 1


# --- firing ----------------------------------------------------------------------------------


def test_wake_record_is_keyed_by_session_and_carries_the_key() -> None:
    """A wake is `{"session_id", "wake": key}` keyed by the session id."""
    key, value = wake_record(Timer(session_id="s9", key="run1:w:1", at=T0))
    assert key == b"s9"
    assert json.loads(value) == {"session_id": "s9", "wake": "run1:w:1"}


async def test_a_timer_whose_wake_can_never_be_sent_is_set_aside_not_retried() -> None:
    """A due timer whose wake is over the producer's size limit is kept in dead_letters and
    deleted with its batch; the timers due after it fire in the same batch instead of waiting
    behind it forever."""
    events: list[str] = []
    store = FakeTimerStore(events=events)
    await store.upsert_timers([
        timer("s1", "k" * 5000, T0 - timedelta(seconds=3)),
        timer("s2", "after", T0 - timedelta(seconds=1)),
    ])
    producer = FakeProducer(events=events, max_request_size=1000)
    assert await make_firing(store, producer).fire_batch() == 2
    assert [k for _t, k, _v in producer.sent] == [b"s2"]
    (kept,) = store.kept
    assert kept.reason == "too-large" and kept.key == b"s1"
    assert json.loads(kept.value or b"")["wake"] == "k" * 5000
    assert store.rows == {}
    assert events[-3:] == ["ack after", "kept too-large", "commit ['" + "k" * 5000 + "', 'after']"]


async def test_fire_batch_sends_only_due_timers_then_deletes_them() -> None:
    """Due rows are produced and deleted after their acks; rows not yet due stay."""
    events: list[str] = []
    store = FakeTimerStore(events=events)
    await store.upsert_timers([
        timer("s1", "due", T0 - timedelta(seconds=2)),
        timer("s2", "later", T0 + timedelta(seconds=30)),
    ])
    producer = FakeProducer(events=events)
    assert await make_firing(store, producer).fire_batch() == 1
    assert [(t, k) for t, k, _ in producer.sent] == [("inbound.turns", b"s1")]
    assert events[-2:] == ["ack due", "commit ['due']"]
    assert list(store.keys()) == ["later"]


async def test_a_failed_ack_keeps_only_its_own_timer() -> None:
    """When a wake of a batch is not acknowledged, its row stays (to be claimed again) and the
    batch raises; the rows whose wakes were acknowledged, or set aside, are deleted first, so
    a retry does not wake their sessions again."""
    events: list[str] = []
    store = FakeTimerStore(events=events)
    await store.upsert_timers([
        timer("s1", "a", T0 - timedelta(seconds=3)),
        timer("s2", "b", T0 - timedelta(seconds=2)),
        timer("s3", "k" * 5000, T0 - timedelta(seconds=1)),
        timer("s4", "d", T0),
    ])
    producer = FakeProducer(fail_for={"s2"}, events=events, max_request_size=1000)
    with pytest.raises(ConnectionError):
        await make_firing(store, producer).fire_batch()
    assert store.keys() == ["b"]
    assert store.locked == set()
    assert [k for _, k, _ in producer.sent] == [b"s1", b"s4"]
    assert [letter.reason for letter in store.kept] == ["too-large"]
    assert events[-1] == "commit ['a', 'd', '" + "k" * 5000 + "']"
    producer.fail_for.clear()
    assert await make_firing(store, producer).fire_batch() == 1
    assert [k for _, k, _ in producer.sent] == [b"s1", b"s4", b"s2"]
    assert store.rows == {}


async def test_step_fires_in_batches_until_nothing_is_due() -> None:
    """One step drains every due row in batches of `batch_size` and reports the next sleep."""
    store = FakeTimerStore()
    await store.upsert_timers(
        [timer(f"s{i}", f"k{i}", T0 - timedelta(seconds=i)) for i in range(7)]
        + [timer("s", "next", T0 + timedelta(seconds=2))]
    )
    producer = FakeProducer()
    sleep_for = await make_firing(store, producer, batch_size=3, max_idle=10).step()
    assert len(producer.sent) == 7
    assert list(store.keys()) == ["next"]
    assert sleep_for == 2.0


async def test_step_caps_sleep_at_max_idle() -> None:
    """With nothing stored, or the next timer far away, the sleep is `max_idle`."""
    store = FakeTimerStore()
    firing = make_firing(store, FakeProducer(), max_idle=4)
    assert await firing.step() == 4
    await store.upsert_timers([timer("s", "far", T0 + timedelta(hours=1))])
    assert await firing.step() == 4


async def test_step_backs_off_while_another_replica_holds_the_due_rows() -> None:
    """Due rows locked elsewhere give growing sleeps up to a cap, not a spin; once they are
    free again they fire and the back-off resets."""
    store = FakeTimerStore()
    await store.upsert_timers([timer("s", "held", T0 - timedelta(seconds=1))])
    store.locked.add(("s", "held"))
    producer = FakeProducer()
    firing = make_firing(store, producer, contended_sleep=0.01, contended_max=0.05)
    sleeps = [await firing.step() for _ in range(5)]
    assert sleeps == [0.01, 0.02, 0.04, 0.05, 0.05]
    assert producer.sent == []
    store.locked.clear()
    await store.upsert_timers([timer("s", "later", T0 + timedelta(seconds=3))])
    assert await firing.step() == 3.0
    assert [k for _, k, _ in producer.sent] == [b"s"]
    store.locked.add(("s", "later"))
    store.now = T0 + timedelta(seconds=4)
    assert await firing.step() == 0.01


async def test_step_publishes_metrics() -> None:
    """Firing counts wakes, observes fire delays, and sets the pending gauge."""
    store = FakeTimerStore()
    await store.upsert_timers([
        timer("s1", "a", T0 - timedelta(seconds=3)),
        timer("s2", "b", T0 + timedelta(seconds=60)),
    ])
    wakes = metrics.WAKES_EMITTED._value.get()
    delays_over_2s = _histogram_count_above(2.0)
    await make_firing(store, FakeProducer()).step()
    assert metrics.WAKES_EMITTED._value.get() == wakes + 1
    assert _histogram_count_above(2.0) == delays_over_2s + 1
    assert metrics.TIMERS_PENDING._value.get() == 1


async def test_the_pending_count_runs_once_per_refresh_however_often_timers_fire() -> None:
    """count(*) reads the whole table: timers falling due at every step must not make every
    step count it; the gauge is refreshed once per ``pending_refresh``."""
    store = FakeTimerStore()
    counts = 0
    count_rows = store.timers_pending

    async def counted() -> int:
        nonlocal counts
        counts += 1
        return await count_rows()

    store.timers_pending = counted  # type: ignore[method-assign]
    producer = FakeProducer()
    firing = make_firing(store, producer, pending_refresh=3600.0)
    for n in range(5):
        await store.upsert_timers([timer(f"s{n}", "due", T0 - timedelta(seconds=1))])
        await firing.step()
    assert [k for _, k, _ in producer.sent] == [f"s{n}".encode() for n in range(5)]
    assert counts == 1


def _histogram_count_above(seconds: float) -> float:
    count = total = 0.0
    for sample in next(iter(metrics.TIMER_FIRE_DELAY.collect())).samples:
        if sample.name.endswith("_bucket") and float(sample.labels["le"]) == seconds:
            count = sample.value
        if sample.name.endswith("_count"):
            total = sample.value
    return total - count


async def test_poke_cuts_the_sleep_short() -> None:
    """A timer stored while the loop sleeps towards `max_idle` is fired once intake pokes."""
    store = FakeTimerStore()
    producer = FakeProducer()
    firing = make_firing(store, producer, max_idle=3600)
    stop = asyncio.Event()
    loop = asyncio.create_task(firing.run(stop))
    try:
        await eventually(lambda: firing.healthy)
        await store.upsert_timers([timer("s1", "now", T0)])
        firing.poke()
        await eventually(lambda: bool(producer.sent))
        assert json.loads(producer.sent[0][2]) == {"session_id": "s1", "wake": "now"}
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await loop


async def test_run_survives_a_failing_round_and_retries() -> None:
    """A round that fails marks the loop unhealthy, and the next round fires what is due."""
    store = FakeTimerStore()
    await store.upsert_timers([timer("s1", "a", T0)])
    producer = FakeProducer(fail_for={"s1"})
    firing = make_firing(store, producer, retry_delay=0.01)
    stop = asyncio.Event()
    loop = asyncio.create_task(firing.run(stop))
    try:
        await eventually(lambda: producer.failed >= 2)
        assert not firing.healthy
        assert list(store.keys()) == ["a"]
        producer.fail_for.clear()
        await eventually(lambda: not store.rows)
        assert [k for _, k, _ in producer.sent] == [b"s1"]
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await loop


async def test_stop_ends_a_sleeping_loop() -> None:
    """Setting `stop` returns `run` even in the middle of a long sleep."""
    firing = make_firing(FakeTimerStore(), FakeProducer(), max_idle=3600)
    stop = asyncio.Event()
    loop = asyncio.create_task(firing.run(stop))
    await eventually(lambda: firing.healthy)
    stop.set()
    async with asyncio.timeout(30):
        await loop
    assert loop.done() and loop.exception() is None


@dataclass
class HeldAcksProducer:
    """Records sends in order; acks resolve only when the test releases them."""

    sent: list[str] = field(default_factory=list)
    acks: list[asyncio.Future[Any]] = field(default_factory=list)

    async def send(self, topic: str, value: bytes, *, key: bytes) -> asyncio.Future[Any]:
        self.sent.append(json.loads(value)["wake"])
        ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.acks.append(ack)
        return ack


async def test_pipeline_claims_the_next_batch_before_the_first_is_acked() -> None:
    """With pipeline=2 a second batch is claimed and sent while the first awaits its acks."""
    store = FakeTimerStore()
    await store.upsert_timers(
        [timer("s", f"k{i}", T0 - timedelta(seconds=10 - i)) for i in range(5)]
    )
    producer = HeldAcksProducer()
    firing = TimerFiring(
        store=store,
        producer=producer,
        topic="inbound.turns",
        options=FiringOptions(batch_size=2, pipeline=2),
    )
    fired = asyncio.create_task(firing.fire_due())
    await eventually(lambda: len(producer.sent) == 4)
    # Two batches out, none acknowledged: nothing deleted, the third batch not yet claimed.
    assert producer.sent == ["k0", "k1", "k2", "k3"]
    assert len(store.rows) == 5
    assert store.locked == {("s", f"k{i}") for i in range(4)}
    for ack in producer.acks:
        ack.set_result(None)
    await eventually(lambda: len(producer.sent) == 5)
    producer.acks[-1].set_result(None)
    async with asyncio.timeout(30):
        assert await fired == 5
    assert producer.sent == ["k0", "k1", "k2", "k3", "k4"]
    assert store.rows == {}


async def test_pipeline_failure_keeps_failed_rows_and_finishes_the_others() -> None:
    """A batch whose ack fails keeps the failed row (its acknowledged row is deleted); a batch
    already sent still completes; it raises."""
    store = FakeTimerStore()
    await store.upsert_timers(
        [timer("s", f"k{i}", T0 - timedelta(seconds=10 - i)) for i in range(4)]
    )
    producer = HeldAcksProducer()
    firing = TimerFiring(
        store=store,
        producer=producer,
        topic="inbound.turns",
        options=FiringOptions(batch_size=2, pipeline=2),
    )
    fired = asyncio.create_task(firing.fire_due())
    await eventually(lambda: len(producer.sent) == 4)
    producer.acks[0].set_exception(ConnectionError("broker down"))
    for ack in producer.acks[1:]:
        ack.set_result(None)
    with pytest.raises(ConnectionError):
        async with asyncio.timeout(30):
            await fired
    assert sorted(store.keys()) == ["k0"]
    assert store.locked == set()


async def test_a_batch_failing_to_send_does_not_stall_the_next() -> None:
    """When a batch's send raises, the batch claimed behind it still sends and completes."""
    both_claimed = asyncio.Event()

    @dataclass
    class RefusingProducer(FakeProducer):
        async def send(self, topic: str, value: bytes, *, key: bytes) -> asyncio.Future[Any]:
            if json.loads(value)["wake"] == "k0":
                await both_claimed.wait()
                raise ConnectionError("not connected")
            return await super().send(topic, value, key=key)

    store = FakeTimerStore()
    await store.upsert_timers(
        [timer("s", f"k{i}", T0 - timedelta(seconds=10 - i)) for i in range(4)]
    )
    producer = RefusingProducer()
    firing = make_firing(store, producer, batch_size=2, pipeline=2)
    fired = asyncio.create_task(firing.fire_due())
    await eventually(lambda: len(store.locked) == 4)
    assert producer.sent == []
    both_claimed.set()
    with pytest.raises(ConnectionError):
        async with asyncio.timeout(30):
            await fired
    assert [json.loads(v)["wake"] for _, _, v in producer.sent] == ["k2", "k3"]
    assert sorted(store.keys()) == ["k0", "k1"]
    assert store.locked == set()


async def test_stop_ends_a_backlog_drain_between_batches() -> None:
    """With `stop` set, draining ends after the batches in flight; the rest stays stored."""
    store = FakeTimerStore()
    await store.upsert_timers(
        [timer("s", f"k{i}", T0 - timedelta(seconds=100 - i)) for i in range(10)]
    )
    stop = asyncio.Event()
    stop.set()
    fired = await make_firing(store, FakeProducer(), batch_size=2, pipeline=1).fire_due(stop)
    assert fired == 2
    assert sorted(store.keys()) == [f"k{i}" for i in range(2, 10)]


async def test_intake_rewinds_every_partition_even_after_losing_one() -> None:
    """A partition that can no longer be rewound does not stop the others from rewinding."""

    @dataclass
    class RevokedConsumer(FakeConsumer):
        def seek(self, partition: TopicPartition, offset: int) -> None:
            if partition == P0:
                raise IllegalStateError("partition not assigned")
            super().seek(partition, offset)

    consumer = RevokedConsumer(
        batches=[{P0: [FakeRecord(4, entry("a"))], P1: [FakeRecord(9, entry("c"))]}]
    )
    with pytest.raises(ConnectionError):
        await make_intake(consumer, FakeTimerStore(fail_upsert=True), []).step()
    assert consumer.seeks == [(P1, 9)]
    assert consumer.committed == []
