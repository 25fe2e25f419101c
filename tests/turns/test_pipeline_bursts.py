"""A burst through the pipeline: one turn for several records, each record and id kept."""

from __future__ import annotations

from typing import Any

from consumer.turns.pipeline import burst_of
from store import SourceRecord
from tests.consumer.fakes import FakeProducer, FakeStore
from tests.turns.test_pipeline import FakeAgent, pipeline, work


class BurstAgent(FakeAgent):
    """FakeAgent that keeps every request it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []

    async def turn(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        return await super().turn(request)


async def test_a_burst_is_one_agent_turn_and_one_save_keeping_every_record() -> None:
    """Three waiting messages make one agent call with the first two as its burst; the save
    keeps the last record as the turn's own and the others, with their ids, as consumed."""
    store, agent, producer = FakeStore(), BurstAgent(), FakeProducer()
    result = await pipeline(store, agent, producer).apply(
        burst_of([work("a", 1), work("b", 2), work("c", 3)])
    )
    assert result.status == "applied" and result.inputs == 3
    (request,) = agent.requests
    assert request["message"] == "c" and request["id"] == "c"
    assert request["burst"] == [{"message": "a", "id": "a"}, {"message": "b", "id": "b"}]
    (saved,) = store.saves
    assert saved.turn.source == SourceRecord("in", 0, 3)
    assert [(e.source, e.input_id) for e in saved.turn.earlier] == [
        (SourceRecord("in", 0, 1), "a"), (SourceRecord("in", 0, 2), "b"),
    ]
    assert saved.turn.input["burst"] == request["burst"]
    assert len(producer.sent) == 2  # one reply and one timer, for the whole burst


async def test_a_burst_replayed_after_a_restart_answers_only_what_is_new() -> None:
    """Records 1-2 were answered before a restart; refetched with record 3, only 3 runs."""
    store, agent, producer = FakeStore(), BurstAgent(), FakeProducer()
    pipe = pipeline(store, agent, producer)
    await pipe.apply(burst_of([work("a", 1), work("b", 2)]))
    again = await pipe.apply(burst_of([work("a", 1), work("b", 2), work("c", 3)]))
    assert again.status == "applied" and again.inputs == 1
    last = agent.requests[-1]
    assert last["message"] == "c" and "burst" not in last
    assert store.saves[-1].turn.earlier == ()


async def test_a_burst_of_answered_records_is_skipped_and_of_known_ids_is_a_duplicate() -> None:
    """All records applied: a replay skip. All ids known at new offsets: duplicate-input,
    and the agent is not called either time."""
    store, agent, producer = FakeStore(), BurstAgent(), FakeProducer()
    pipe = pipeline(store, agent, producer)
    await pipe.apply(burst_of([work("a", 1), work("b", 2)]))
    replay = await pipe.apply(burst_of([work("a", 1), work("b", 2)]))
    copies = await pipe.apply(burst_of([work("a", 8), work("b", 9)]))
    assert (replay.status, copies.status) == ("skipped", "duplicate")
    assert len(agent.requests) == 1


async def test_a_copy_inside_a_burst_is_dropped_and_its_record_kept() -> None:
    """A re-produced message among new ones is not answered again; its record is kept as
    consumed without an id, so a replay of it is recognised as a replay."""
    store, agent, producer = FakeStore(), BurstAgent(), FakeProducer()
    pipe = pipeline(store, agent, producer)
    await pipe.apply(work("a", 1))
    await pipe.apply(burst_of([work("a", 5), work("b", 6), work("c", 7)]))
    last = agent.requests[-1]
    assert last["burst"] == [{"message": "b", "id": "b"}] and last["message"] == "c"
    earlier = store.saves[-1].turn.earlier
    assert (SourceRecord("in", 0, 5), None) in [(e.source, e.input_id) for e in earlier]
    replay = await pipe.apply(work("a", 5))
    assert replay.status == "skipped"


async def test_bursts_of_many_sessions_keep_their_own_replies() -> None:
    """Twenty sessions' bursts through one pipeline: each save and reply names its session."""
    store, agent, producer = FakeStore(), BurstAgent(), FakeProducer()
    pipe = pipeline(store, agent, producer)
    import asyncio

    await asyncio.gather(*(
        pipe.apply(burst_of([work(f"x{n}-{i}", n * 3 + i, f"s{n}") for i in range(3)]))
        for n in range(20)
    ))
    assert len(store.saves) == 20
    for saved in store.saves:
        n = int(saved.session_id[1:])
        assert saved.turn.input["message"] == f"x{n}-2"
        assert [m["message"] for m in saved.turn.input["burst"]] == [f"x{n}-0", f"x{n}-1"]
        assert [(e.source.offset if e.source else None, e.input_id) for e in saved.turn.earlier] \
            == [(n * 3, f"x{n}-0"), (n * 3 + 1, f"x{n}-1")]
        assert all(o.key == saved.session_id for o in saved.outbox)
