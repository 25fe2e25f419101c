"""The trace context the store keeps (migration 0018): a turn's context on each of its outbox
rows and its trace id on its turn-log row, by the single and the grouped save alike; a timer's
context through upsert, replace and claim; and rows written without one work as before."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import asyncpg

from store import Store, TimerEntry
from tests.store.builders import save_request

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def parent(n: int) -> str:
    return f"00-{n:032x}-{n:016x}-01"


async def _turn_trace_ids(url: str) -> dict[tuple[str, int], str | None]:
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT session_id, version, trace_id FROM turns")
    finally:
        await connection.close()
    return {(r["session_id"], r["version"]): r["trace_id"] for r in rows}


async def test_a_turns_context_is_kept_on_its_rows_and_its_trace_id_in_the_log(
    store: Store, database_url: str,
) -> None:
    """A save with a context stores it on every outbox row of the turn and, when sampled, the
    trace id on the turn-log row; a save without one stores NULLs; the grouped save does the
    same per turn."""
    traced = dataclasses.replace(
        save_request("s1", 0, outbox=2), traceparent=f"00-{TRACE}-00f067aa0ba902b7-01",
        tracestate="vendor=1",
    )
    await store.save_turn(traced)
    await store.save_turn(save_request("s2", 0, outbox=1))
    grouped = [dataclasses.replace(save_request(f"g{i}", 0, outbox=2), traceparent=parent(i + 1),
                                   tracestate=None if i % 2 else f"v=g{i}")
               for i in range(5)]
    grouped.append(save_request("g-untraced", 0, outbox=1))
    grouped.append(dataclasses.replace(save_request("g-unsampled", 0, outbox=1),
                                       traceparent=f"00-{TRACE}-00f067aa0ba902b7-00"))
    results = await store.save_turns(grouped)
    assert not any(isinstance(r, Exception) for r in results)

    async with store.fetch_unpublished(limit=100) as batch:
        rows = {(r.session_id, r.id): (r.traceparent, r.tracestate) for r in batch.rows}
    by_session: dict[str, set[tuple[str | None, str | None]]] = {}
    for (session, _), context in rows.items():
        by_session.setdefault(session, set()).add(context)
    assert by_session["s1"] == {(f"00-{TRACE}-00f067aa0ba902b7-01", "vendor=1")}
    assert by_session["s2"] == {(None, None)}
    for i in range(5):
        assert by_session[f"g{i}"] == {(parent(i + 1), None if i % 2 else f"v=g{i}")}
    assert by_session["g-untraced"] == {(None, None)}

    ids = await _turn_trace_ids(database_url)
    assert ids[("s1", 1)] == TRACE
    assert ids[("s2", 1)] is None
    assert ids[("g3", 1)] == f"{4:032x}"
    assert ids[("g-untraced", 1)] is None
    assert ids[("g-unsampled", 1)] is None  # its spans were not exported: nothing to link to
    assert by_session["g-unsampled"] == {(f"00-{TRACE}-00f067aa0ba902b7-00", None)}


async def test_a_timers_context_is_stored_replaced_and_claimed_with_it(store: Store) -> None:
    """A timer's context comes back from the claim; setting the key again replaces it with the
    new entry's (or none); a timer set without one claims with None."""
    past = datetime.now(UTC) - timedelta(seconds=5)
    await store.upsert_timers([
        TimerEntry(key="a", session_id="s1", at=past, traceparent=parent(1), tracestate="x=1"),
        TimerEntry(key="b", session_id="s2", at=past, traceparent=parent(2)),
        TimerEntry(key="c", session_id="s3", at=past),
    ])
    await store.upsert_timers([
        TimerEntry(key="b", session_id="s2", at=past, traceparent=parent(22), tracestate="y=2"),
        TimerEntry(key="d", session_id="s1", at=past, replaces="a", traceparent=parent(4)),
    ])
    async with store.claim_due(10) as claim:
        claimed = {(t.session_id, t.key): (t.traceparent, t.tracestate) for t in claim.timers}
        await claim.delete()
    assert claimed == {
        ("s2", "b"): (parent(22), "y=2"),
        ("s3", "c"): (None, None),
        ("s1", "d"): (parent(4), None),
    }


async def test_the_relay_resends_each_sessions_rows_in_its_own_turns_trace(store: Store) -> None:
    """Thirty-two sessions saved together, each turn in its own trace, their rows left
    unpublished: the relay's passes over PostgreSQL send every row with a context of its own
    turn's trace, a child of that turn's span; none carries another session's."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from consumer import tracing
    from consumer.outbox import OutboxPublisher
    from tests.consumer.fakes import FakeProducer

    count = 32
    await store.save_turns([
        dataclasses.replace(save_request(f"r{i}", 0, outbox=2), traceparent=parent(i + 1))
        for i in range(count)
    ])
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider=provider)
    try:
        producer = FakeProducer()
        publisher = OutboxPublisher(store, producer, batch_limit=9)  # type: ignore[arg-type]
        while await publisher.flush_older(older_than=timedelta(0)):
            pass
    finally:
        tracing.shutdown()
    assert len(producer.sent) == 2 * count
    parents = {s.context.span_id: s.parent for s in exporter.get_finished_spans()}
    for (_topic, key, _value), headers in zip(producer.sent, producer.headers, strict=True):
        i = int((key or b"").decode()[1:])
        _, trace_id, span_id, _ = dict(headers)["traceparent"].decode().split("-")
        assert trace_id == f"{i + 1:032x}"
        span_parent = parents[int(span_id, 16)]
        assert span_parent is not None and span_parent.span_id == i + 1
