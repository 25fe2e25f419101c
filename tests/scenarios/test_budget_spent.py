"""A spent tool budget is not a model failure: a model that keeps calling tools past
``max_tool_calls`` ends the reasoning loop within the turn, with its last text or the
``fallback_message``; with neither, the message is answered by the host's fallback at once,
never retried, so no tool runs twice for one customer message."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.turns.decisions import Fallback, RetryPolicy, decide
from engine import BudgetSpent, Tool, UnusableReply
from tests.scenarios.lifecycle_support import CHAT_FLOW, calls, lifecycle_agent, message

TOOL_FLOW = {**CHAT_FLOW, "steps": [{"id": "talk", "tools": ["lookup"]}]}


def _stubborn(cap: int, *, text: str = "", rounds: int = 4) -> list[Any]:
    """A model that asks for ``cap + 1`` tool calls, then keeps asking for more even when
    offered none (``rounds`` more times: more than the loop will ever ask)."""
    return [calls(*[("lookup", {})] * (cap + 1))] + [
        calls(("lookup", {}), text=text) for _ in range(rounds)
    ]


@pytest.mark.parametrize("idle", [False, True])
@pytest.mark.parametrize("cap", [1, 3])
async def test_no_fallback_message_raises_budget_spent_after_running_each_tool_once(
    cap: int, idle: bool
) -> None:
    """Without a fallback message the turn ends with ``BudgetSpent`` (a kind of
    ``UnusableReply`` a host answers at once) after the tool ran ``cap`` times and one last
    call offered no tools; for a step and the idle speaker alike."""
    ran: list[int] = []
    lookup = Tool(description="x", handler=lambda: ran.append(1) or "ok")
    if idle:
        config: dict[str, Any] = {"flows": [], "idle": {"prompt": "Help.", "tools": ["lookup"]}}
    else:
        config = {"flows": [TOOL_FLOW]}
    agent, provider = lifecycle_agent(_stubborn(cap), {"max_tool_calls": cap},
                                      tools={"lookup": lookup}, **config)
    with pytest.raises(BudgetSpent) as raised:
        await agent.turn(message("oi", "m1"))
    assert isinstance(raised.value, UnusableReply)
    assert len(ran) == cap
    assert len(provider.calls) == 2 and provider.calls[-1].tools == []


async def test_a_fallback_message_answers_within_the_turn() -> None:
    """With a fallback message the spent budget answers it in the same turn: no exception,
    outcome fallback, each tool run once."""
    ran: list[int] = []
    lookup = Tool(description="x", handler=lambda: ran.append(1) or "ok")
    agent, _ = lifecycle_agent(
        _stubborn(2), {"max_tool_calls": 2, "fallback_message": "Um momento, por favor."},
        tools={"lookup": lookup}, flows=[TOOL_FLOW],
    )
    result = await agent.turn(message("oi", "m1"))
    assert [m.text for m in result.messages] == ["Um momento, por favor."]
    assert result.turn_outcome == "fallback" and len(ran) == 2


async def test_text_given_with_the_tool_calls_answers_within_the_turn() -> None:
    """The model's own text given with its last tool calls is the answer."""
    lookup = Tool(description="x", handler=lambda: "ok")
    agent, _ = lifecycle_agent(_stubborn(1, text="Achei isto."), {"max_tool_calls": 1},
                               tools={"lookup": lookup}, flows=[TOOL_FLOW])
    result = await agent.turn(message("oi", "m1"))
    assert [m.text for m in result.messages] == ["Achei isto."]


def test_the_host_answers_budget_spent_with_its_fallback_at_once() -> None:
    """The consumer's decision for ``BudgetSpent`` on its first attempt is the fallback, never
    a retry; a plain ``UnusableReply`` is still retried."""
    policy = RetryPolicy(max_retries=3)
    error = BudgetSpent("speak: tool budget spent")
    assert decide(error, attempt=1, policy=policy) == Fallback("budget-spent")
    assert not isinstance(decide(UnusableReply("x"), attempt=1, policy=policy), Fallback)


class StubbornModel:
    """Speaks ``ok: <words>`` to every customer, except one whose words hold ``stubborn``: to
    those it only ever asks for the ``lookup`` tool, offered or not."""

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: Any) -> Any:
        from engine.providers.base import ModelResponse, ToolCall

        self.calls += 1
        words = request.meta.get("message") or ""
        if request.schema_name == "speak" and "stubborn" in words:
            return ModelResponse(tool_calls=[ToolCall(id="c", name="lookup", arguments={})])
        return ModelResponse(json={"message": f"ok: {words}"})


async def test_the_consumer_answers_a_spent_budget_once_with_no_tool_run_twice() -> None:
    """Twelve conversations on two partitions through the consumer with retries allowed; in
    four the model keeps calling tools past the cap: each is answered with the host's fallback
    message after its tool ran exactly ``max_tool_calls`` times (no retry ran them again); the
    others get their own replies and nothing is dead-lettered."""
    import json

    from aiokafka.structs import TopicPartition

    from engine import Agent
    from tests.consumer.fakes import FakeKafkaConsumer
    from tests.turns.test_service_bursts import DlqProducer, run_until, service_on

    runs: dict[str, int] = {}

    def lookup(args: Any, ctx: Any) -> str:
        runs[ctx.session_id] = runs.get(ctx.session_id, 0) + 1
        return "nothing"

    model = StubbornModel()
    agent = Agent(name="Ana", provider=model, flows=[],  # type: ignore[arg-type]
                  idle={"prompt": "Help.", "tools": ["lookup"]},
                  tools={"lookup": Tool(description="x", handler=lookup)},
                  lifecycle={"max_tool_calls": 2})
    tps = [TopicPartition("in", 0), TopicPartition("in", 1)]
    consumer = FakeKafkaConsumer(tps)
    sessions = [f"c{n}" for n in range(12)]
    stubborn = set(sessions[::3])
    for n, session in enumerate(sessions):
        text = "stubborn please" if session in stubborn else f"hello {session}"
        body = {"session_id": session, "message": text, "id": f"{session}/1"}
        consumer.append(tps[n % 2], session.encode(), json.dumps(body).encode())
    producer = DlqProducer()
    service = service_on(consumer, agent, producer, None,  # type: ignore[arg-type]
                         merge_bursts=False, max_retries=3, retry_backoff_ms=0,
                         retry_backoff_max_ms=0, model_fallback_message="Sorry, try again.")
    await run_until(service, lambda: all(consumer.committed(tp) == 6 for tp in tps),
                    "both partitions are committed")
    assert [t for t, _k, _v in producer.sent if t.endswith("dlq")] == []
    for session in sessions:
        texts = [json.loads(v)["text"] for t, k, v in producer.sent
                 if t == "out.m" and k == session.encode()]
        expected = "Sorry, try again." if session in stubborn else f"ok: hello {session}"
        assert texts == [expected], session
    assert runs == {session: 2 for session in stubborn}
