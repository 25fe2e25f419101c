"""A key names one content, however a re-read groups a conversation's inputs.

After an asynchronous failover, a restore from an older backup or a lost commit, turns whose
replies already left are lost and their inputs are read again, with later inputs of the same
conversation waiting behind them, so the consumer may merge into one burst what the first run
answered one by one (or the reverse). These properties run the engine on requests the consume
path builds from records (``parse_record``, ``burst_of``, ``request_of``): several
conversations on the same flows, each answered once with a first grouping, then any prefix of
their turns kept and the rest answered again with any other grouping, possibly twice. Whatever
was sent, before and after, must never hold one key for two contents, and every input must
have a reply under a key sent for a turn that answered it.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumer.turns.parser import ParsedInput, parse_record
from consumer.turns.pipeline import TurnWork, burst_of, request_of
from engine import Agent, session_of
from store.records import SourceRecord
from tests.faults.agent import EACH_MESSAGE_A_RUN, echo_agent, fake_clock

# One run that keeps asking (the model never fills the field): each message is a new visit,
# ``r1@{tag}:ask:{visit}``.
ONE_ASKING_RUN = {"id": "ask", "on": [{"message": []}],
                  "steps": [{"id": "ask", "collect": ["day"]}, {"id": "done", "say": "ok"}]}


def agent(flow: dict[str, Any]) -> Agent:
    return echo_agent(flow, clock=fake_clock())


def work_of(session_id: str, offset: int, text: str, with_id: bool) -> TurnWork:
    """The work the consumer makes of one message record (id-less messages are named by their
    record only)."""
    body: dict[str, Any] = {"session_id": session_id, "message": text,
                            "at": f"2026-01-05T08:59:{offset % 60:02d}Z"}
    if with_id:
        body["id"] = f"wamid.{session_id}.{offset}"
    parsed = parse_record(session_id.encode(), json.dumps(body).encode(), max_bytes=1 << 20,
                          source=f"in:0:{offset}")
    assert isinstance(parsed, ParsedInput)
    return TurnWork(parsed=parsed, source=SourceRecord("in", 0, offset), timestamp_ms=offset)


@dataclass
class Conversation:
    """One conversation's inputs and what every run of it sent."""

    session_id: str
    inputs: list[TurnWork]
    sent: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    answered: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))


async def answer(agent: Agent, talk: Conversation, start: int, session: Any,
                 sizes: list[int]) -> list[tuple[int, Any]]:
    """Answer the inputs from ``start`` on, grouped by ``sizes`` (the last group takes what is
    left), recording what each turn sent; the state after each turn, with the index of the
    next input, for a later loss to fall back to."""
    saved: list[tuple[int, Any]] = []
    position = start
    for size in [*sizes, len(talk.inputs)]:
        if position >= len(talk.inputs):
            break
        group = talk.inputs[position:position + max(1, size)]
        request = request_of(burst_of(group))
        result = await agent.turn({**request, "session": session})
        session = result.session
        for message in result.messages:
            assert session_of(message.key) == talk.session_id, message.key
            talk.sent[message.key].add(message.text)
            for part in group:
                talk.answered[part.source.offset].add(message.key)
        for timer in result.schedule:
            assert session_of(timer.key) == talk.session_id, timer.key
            talk.sent[timer.key].add(timer.at.isoformat())
        session = session.model_copy(update={"version": session.version + 1})
        position += len(group)
        saved.append((position, session))
    return saved


groupings = st.lists(st.integers(min_value=1, max_value=4), max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    flow=st.sampled_from([EACH_MESSAGE_A_RUN, ONE_ASKING_RUN]),
    conversations=st.integers(min_value=1, max_value=3),
    count=st.integers(min_value=1, max_value=8),
    ids=st.lists(st.booleans(), min_size=8, max_size=8),
    first=groupings,
    reruns=st.lists(st.tuples(st.integers(min_value=0, max_value=8), groupings),
                    min_size=1, max_size=2),
)
def test_a_regrouped_rerun_never_reuses_a_key_for_another_content(
    flow: dict[str, Any], conversations: int, count: int, ids: list[bool],
    first: list[int], reruns: list[tuple[int, list[int]]],
) -> None:
    """Conversations on the same flow are answered with one grouping, lose any number of
    their last turns after the replies went out, and are answered again from the state they
    kept with any other grouping (more messages waiting, fewer, some without ids), up to
    twice: no key is ever sent for two contents, no key leaves its conversation, and every
    input has a reply under a key a turn that answered it sent."""
    bot = agent(flow)
    talks = [
        Conversation(f"wa-{n}", [work_of(f"wa-{n}", i, f"m{i}", ids[i]) for i in range(count)])
        for n in range(conversations)
    ]

    async def go() -> None:
        for talk in talks:
            saved = await answer(bot, talk, 0, None, first)
            for kept, sizes in reruns:
                # The database kept ``kept`` of the turns of the last run; the rest is re-read.
                start, session = saved[min(kept, len(saved)) - 1] if kept else (0, None)
                saved = saved[:kept] + await answer(bot, talk, start, session, sizes)

    asyncio.run(go())
    for talk in talks:
        reused = {key: texts for key, texts in talk.sent.items() if len(texts) > 1}
        assert reused == {}, f"{talk.session_id}: keys with two contents: {reused}"
        unanswered = [i for i in range(count) if not talk.answered[i]]
        assert unanswered == [], f"{talk.session_id}: inputs with no reply: {unanswered}"
    every_key = [key for talk in talks for key in talk.sent]
    assert len(every_key) == len(set(every_key))  # no key shared between conversations


def test_the_failover_case_answers_the_waiting_message_under_a_new_key() -> None:
    """The case met after an asynchronous promotion: m3 answered alone (its reply delivered),
    its turn lost, m3 re-read with m4 waiting and answered as one burst: the burst's reply has
    a key the first run never sent, so a delivery worker that dedupes on keys delivers it."""
    bot = agent(EACH_MESSAGE_A_RUN)
    talk = Conversation("wa-5511", [work_of("wa-5511", i, f"m{i}", True) for i in range(2)])

    async def go() -> tuple[list[tuple[int, Any]], list[tuple[int, Any]]]:
        before = await answer(bot, talk, 0, None, [1])  # m0, then m1 alone
        after = await answer(bot, talk, 0, None, [2])  # both lost; m0 and m1 as one burst
        return before, after

    asyncio.run(go())
    keys = sorted(talk.sent)
    assert len(keys) == 3
    assert talk.sent["r1@wa-5511:ack:1"] == {"re:m0"}
    assert talk.sent["r2@wa-5511:ack:1"] == {"re:m1"}
    (burst_key,) = set(keys) - {"r1@wa-5511:ack:1", "r2@wa-5511:ack:1"}
    assert burst_key.startswith("r1@wa-5511@") and talk.sent[burst_key] == {"re:m0|m1"}
