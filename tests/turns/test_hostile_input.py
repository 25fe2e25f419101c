"""Hostile input: no record, however malformed, raises out of the parsers or stops the loop.

Arbitrary bytes, arbitrary JSON text (``NaN``, ``Infinity``, numbers past a double, integers
past the decoder's digit limit, nesting past its depth, NUL and lone surrogates written as
``\\u`` escapes) and arbitrary unicode go through ``parse_record``, through the consumer's
decision path (the real ``ConsumerService`` loop with in-memory store and producer) and through
the schedule parser. Every record must end applied or dead-lettered with a reason, nothing may
raise, and the good record after the hostile ones must still be answered, in order.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiokafka.structs import ConsumerRecord, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumer.errors import ScheduleRecordError
from consumer.outbox import OutboxPublisher
from consumer.scheduler.intake import parse_schedule_record
from consumer.settings import Settings
from consumer.turns.parser import ParsedInput, Rejected, parse_record
from consumer.turns.pipeline import OutboundTopics, TurnPipeline
from consumer.turns.service import ConsumerService
from engine import Agent, FakeClock, MockProvider, TurnRequest, TurnRequestError, ok
from store import SavedTurn, SaveRequest, TimerEntry, jsoncodec
from tests.consumer.fakes import FakeProducer, FakeStore, fake_clients

TP = TopicPartition("inbound.turns", 0)
GOOD = "s-good"
OTHER = "s-other"
LIMIT = 4096
REASONS = {
    "empty", "too-large", "not-utf8", "not-json", "not-an-object", "invalid-text",
    "missing-session-id", "key-mismatch", "unknown-kind", "invalid-field", "too-deep",
    "invalid-request",
    "unstorable-text", "out-of-range", "invalid-data", "turn-failed", "retries-exhausted",
    "provider-fatal",
}

# -- strategies ----------------------------------------------------------------------------

_SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
hostile_text = st.text(
    alphabet=st.characters() | _SURROGATE | st.just("\x00"), max_size=12
)
"""Unicode with NUL and lone surrogates mixed in."""


def _escaped(text: str) -> str:
    """``text`` as a JSON string literal; NUL and surrogates become ``\\u`` escapes."""
    return json.dumps(text)


_numbers = st.one_of(
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "0", "-0.0", "1e-400"]),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.integers(min_value=4200, max_value=4400).map(lambda n: "9" * n),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
_scalars = st.one_of(
    _numbers, hostile_text.map(_escaped), st.sampled_from(["null", "true", "false"])
)
_deep = st.integers(min_value=1, max_value=3000).flatmap(
    lambda depth: st.sampled_from(["[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth])
)
json_text = st.recursive(
    _scalars | _deep,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: "[" + ",".join(items) + "]"),
        st.lists(st.tuples(hostile_text.map(_escaped), inner), max_size=3).map(
            lambda pairs: "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}"
        ),
    ),
    max_leaves=6,
)
"""JSON text, valid or nearly so, with every construct a JSON decoder or jsonb may refuse."""

_FIELDS = ("message", "id", "at", "wake", "event", "key", "payload", "start", "context",
           "silenced", "direction")


@st.composite
def hostile_records(draw: st.DrawFn) -> tuple[bytes | None, bytes]:
    """A record aimed at the good session: keyed by it, its session_id usually the same, and
    some of the input fields holding hostile JSON text; or else arbitrary bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.none(), st.binary(max_size=20))), draw(st.binary(max_size=200))
    session = draw(st.one_of(st.just(_escaped(GOOD)), hostile_text.map(_escaped), json_text))
    kind = draw(st.sampled_from(["message", "wake", "event", "start"]))
    fields = {"session_id": session, kind: draw(st.one_of(hostile_text.map(_escaped), json_text))}
    for name in draw(st.lists(st.sampled_from(_FIELDS), max_size=3, unique=True)):
        fields[name] = draw(json_text)
    if kind == "event" and draw(st.booleans()):
        fields["key"] = draw(hostile_text.map(_escaped))
    if kind == "start" and draw(st.booleans()):
        fields["start"] = '{"flow":"count","key":' + draw(hostile_text.map(_escaped)) + "}"
    body = "{" + ",".join(f'"{name}":{value}' for name, value in fields.items()) + "}"
    return GOOD.encode(), body.encode("utf-8", "surrogatepass")


# -- parse_record ----------------------------------------------------------------------------


def _assert_storable(value: Any) -> None:
    """Every string in an accepted request can be stored: UTF-8 encodable, no NUL."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            assert "\x00" not in item
            item.encode("utf-8")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float):
            assert item == item and item not in (float("inf"), float("-inf"))


def _check_parse(key: bytes | None, value: bytes) -> ParsedInput | Rejected:
    parsed = parse_record(key, value, max_bytes=LIMIT, source="inbound.turns:0:1")
    if isinstance(parsed, Rejected):
        assert parsed.reason in REASONS and parsed.detail
        return parsed
    assert isinstance(parsed, ParsedInput)
    _assert_storable(parsed.request)
    try:
        TurnRequest.parse(parsed.request)
    except TurnRequestError as exc:  # the engine's own refusal is a reason too
        assert str(exc)
    return parsed


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=40)), st.binary(max_size=600))
def test_parse_record_takes_arbitrary_bytes(key: bytes | None, value: bytes) -> None:
    """Any key and value bytes give an accepted, storable input or a refusal with a reason."""
    _check_parse(key, value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_text)
def test_parse_record_takes_arbitrary_json_text(text: str) -> None:
    """Any JSON text, NaN, huge numbers, deep nesting and escaped surrogates included, gives an
    accepted, storable input or a refusal with a reason."""
    _check_parse(GOOD.encode(), text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_records())
def test_parse_record_takes_hostile_input_records(record: tuple[bytes | None, bytes]) -> None:
    """Records shaped like inputs, with hostile fields, are accepted only when every string in
    them can be stored; anything else is refused with a reason."""
    _check_parse(*record)


@settings(max_examples=200, deadline=None)
@given(hostile_text, hostile_text, hostile_text)
def test_unicode_in_the_fields_is_accepted_only_when_storable(
    session_id: str, message: str, context_value: str
) -> None:
    """Arbitrary unicode in session_id, message and context: a NUL or a lone surrogate anywhere
    is refused as invalid-text (or for an earlier reason), never passed on."""
    body = json.dumps({"session_id": session_id, "message": message,
                       "context": {"k": context_value}})
    key = session_id.encode("utf-8", "surrogatepass")
    parsed = _check_parse(key, body.encode())
    unstorable = any("\x00" in s or any(0xD800 <= ord(c) <= 0xDFFF for c in s)
                     for s in (session_id, message, context_value))
    if unstorable:
        assert isinstance(parsed, Rejected)


# -- the schedule parser -----------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.binary(max_size=300),
    json_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.tuples(hostile_text, hostile_text, json_text).map(
        lambda f: f'{{"session_id":{_escaped(f[0])},"key":{_escaped(f[1])},"at":{f[2]}}}'
        .encode("utf-8", "surrogatepass")
    ),
))
def test_schedule_parser_takes_arbitrary_bytes(value: bytes) -> None:
    """Any schedule record value gives a storable timer entry with an aware UTC time, or a
    ScheduleRecordError with a reason code, never another exception."""
    try:
        entry = parse_schedule_record(value)
    except ScheduleRecordError as exc:
        assert exc.reason in ("empty", "not-json", "not-an-object", "invalid-text",
                              "invalid-field")
        return
    assert isinstance(entry, TimerEntry)
    _assert_storable([entry.session_id, entry.key, entry.replaces])
    assert entry.at.utcoffset() is not None and entry.at.utcoffset().total_seconds() == 0


# -- the consumer loop ------------------------------------------------------------------------


class PostgresLikeStore(FakeStore):
    """The in-memory store, refusing what PostgreSQL refuses: text that is not UTF-8."""

    async def save_turn(self, request: SaveRequest) -> SavedTurn:
        jsoncodec.dumps(
            [request.session_id, request.state, request.turn.input,
             [entry.payload for entry in request.outbox]]
        ).encode("utf-8")
        return await super().save_turn(request)


class LoopConsumer:
    """Just enough of AIOKafkaConsumer for the service's commit and back-pressure paths."""

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        return None

    def assignment(self) -> set[TopicPartition]:
        return {TP}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {TP.partition}

    def pause(self, *partitions: TopicPartition) -> None:
        return None

    def resume(self, *partitions: TopicPartition) -> None:
        return None


def counting_agent() -> Agent:
    """A code-only agent: each message adds one to ``n`` and says ``"<n>:<label>"``, the label
    read from the input's context, so a lost or reordered good input shows in the replies."""

    async def count(ctx: Any) -> Any:
        label = ctx.context.get("label")
        return ok(data={"n": int(ctx.data.get("n") or 0) + 1,
                        "last": label if isinstance(label, str) else "?"})

    return Agent(
        name="Contadora",
        provider=MockProvider([]),
        clock=FakeClock("2026-01-05T09:00:00Z"),
        fields={"n": {"type": "integer"}, "last": {"type": "string"}},
        actions={"count": count},
        idle="silent",
        flows=[{
            "id": "count",
            "on": [{"message": []}],
            "steps": [{"id": "c", "do": "count"}, {"id": "say", "say": "{{n}}:{{last}}"}],
        }],
    )


def _record(offset: int, key: bytes | None, value: bytes | None) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic=TP.topic, partition=TP.partition, offset=offset, timestamp=0, timestamp_type=0,
        key=key, value=value, checksum=None, serialized_key_size=len(key or b""),
        serialized_value_size=len(value or b""), headers=[],
    )


def _good(label: str, session_id: str = GOOD) -> bytes:
    return json.dumps(
        {"session_id": session_id, "message": label, "context": {"label": label}}
    ).encode()


async def run_loop(
    records: list[tuple[bytes | None, bytes | None]],
) -> tuple[PostgresLikeStore, FakeProducer]:
    """Feed ``records`` through the service's fetch-side entry point and wait until every
    offset is done (applied or dead-lettered); fail if that does not happen."""
    store, producer = PostgresLikeStore(), FakeProducer()
    agent = counting_agent()
    pipeline = TurnPipeline(
        store=store, agent=agent,  # type: ignore[arg-type]
        publisher=OutboxPublisher(store, producer),  # type: ignore[arg-type]
        topics=OutboundTopics(messages="out", schedule="sched"),
    )
    service = ConsumerService(
        Settings(kafka_bootstrap_servers="127.0.0.1:1", max_record_bytes=LIMIT, max_retries=1,
                 retry_backoff_ms=0, retry_backoff_max_ms=0, dlq_topic="dlq",
                 merge_bursts=False),  # one turn per record: each record's own fate is checked
        agent, clients=fake_clients(LoopConsumer(), store, producer, pipeline),
    )
    service.parts.handover.assigned({TP})
    epoch = service.parts.ownership.epochs[TP]
    for offset, (key, value) in enumerate(records):
        service.parts.intake.accept(TP, _record(offset, key, value), epoch)
    async with asyncio.timeout(20):
        # The watermark is the service's own state; waiting on it is the assertion.
        while service.parts.commits.marks.committable(TP) != len(records):  # noqa: ASYNC110
            await asyncio.sleep(0.001)
    assert not service.parts.workers.tasks and not service.parts.side_tasks.tasks
    return store, producer


def _fates(store: FakeStore, producer: FakeProducer, count: int) -> dict[int, str]:
    """How each offset ended: ``applied``, ``duplicate`` (a copy of an applied input, skipped),
    or the DLQ reason it was sent with."""
    fates: dict[int, str] = {}
    for (_topic, _part, offset) in store.applied:
        fates[offset] = "applied"
    for (_topic, _part, offset) in store.duplicates:
        assert offset not in fates, f"offset {offset} both applied and skipped as a copy"
        fates[offset] = "duplicate"
    for (topic, _key, _value), headers in zip(producer.sent, producer.headers, strict=True):
        if topic != "dlq":
            continue
        found = dict(headers)
        offset = int(found["source-offset"])
        assert offset not in fates, f"offset {offset} both applied and dead-lettered"
        fates[offset] = found["error"].decode()
    assert sorted(fates) == list(range(count))
    return fates


def _replies(producer: FakeProducer, session_id: str = GOOD) -> list[str]:
    return [
        json.loads(value)["text"] for topic, key, value in producer.sent
        if topic == "out" and key == session_id.encode()
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_records(), min_size=1, max_size=4))
def test_every_hostile_record_ends_applied_or_dead_lettered_and_the_next_is_answered(
    hostile: list[tuple[bytes | None, bytes]],
) -> None:
    """Between a good first and a good last message of one session, hostile records (most of
    them for that same session) each end applied or dead-lettered with a reason; the loop
    never stops, the last good message is answered after the first, in order, and a second
    session on the same partition gets exactly its own two replies."""
    records = [(GOOD.encode(), _good("first")), (OTHER.encode(), _good("first", OTHER)),
               *hostile,
               (OTHER.encode(), _good("last", OTHER)), (GOOD.encode(), _good("last"))]
    store, producer = asyncio.run(run_loop(records))
    fates = _fates(store, producer, len(records))
    assert [fates[i] for i in (0, 1, len(records) - 2, len(records) - 1)] == ["applied"] * 4
    assert _replies(producer, OTHER) == ["1:first", "2:last"]
    # Nothing here can be fixed by a retry: each refusal is immediate and has its own reason.
    assert set(fates.values()) <= (
        REASONS - {"turn-failed", "retries-exhausted"} | {"applied", "duplicate"}
    )
    replies = _replies(producer)
    assert replies[0] == "1:first"
    assert replies[-1].endswith(":last")


def test_the_poison_pill_of_a_lone_surrogate_is_refused_and_the_loop_goes_on() -> None:
    """The record that used to kill the consumer (a JSON-escaped lone surrogate in session_id)
    is dead-lettered as invalid-text without a retry, and the next good record is answered."""
    poison = b'{"session_id":"b-sur\\ud800sid","message":"hi"}'
    records = [(b"b-sursid", poison), (b"s-nul", b'{"session_id":"s-nul\\u0000","message":"x"}'),
               (GOOD.encode(), b'{"session_id":"s-good","message":"x","at":"NaN"}'),
               (GOOD.encode(), b'{"session_id":"s-good","message":"x","context":{"n":NaN}}'),
               (GOOD.encode(), _good("last"))]
    store, producer = asyncio.run(run_loop(records))
    fates = _fates(store, producer, len(records))
    assert fates == {0: "invalid-text", 1: "invalid-text", 2: "invalid-field", 3: "not-json",
                     4: "applied"}
    assert _replies(producer) == ["1:last"]
    assert store.calls.count("save_turn") == 1
