"""``--model live``: the recorded conversations with the model asked again, and the drift of
its decisions per kind."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from consumer.cli import main
from engine import Agent, FakeClock, ModelRequest, ModelResponse
from engine.providers import RuleProvider
from replay import Conversation, record_conversation
from replay.golden import write_golden
from replay.live import live_drift
from tests.replay.support import Misrouting, demo, script


async def _recorded(count: int) -> list[Conversation]:
    agent = demo()
    return list(await asyncio.gather(
        *(record_conversation(agent, f"s-{n}", script(n)) for n in range(count))))


async def test_the_same_model_shows_no_drift() -> None:
    """Asked again, the model the conversations were recorded with decides the same."""
    conversations = await _recorded(10)
    drift = await live_drift(demo(), conversations, provider=RuleProvider())
    assert drift.compared["route"] >= 10 and drift.compared["fields"] >= 10
    assert drift.percent("route") == 0.0 and drift.percent("fields") == 0.0
    assert drift.percent("branches") is None  # the demo's branch is decided in code
    assert drift.failed_turns == 0


async def test_a_model_that_routes_differently_is_caught() -> None:
    """A model that sends opening-hours questions to a booking drifts on exactly those
    routes, and one that hears Monday as Tuesday drifts on that field."""
    conversations = await _recorded(10)
    drift = await live_drift(demo(), conversations, provider=Misrouting())
    routes = [e for e in drift.examples if e["decision"] == "route"]
    assert {e["session_id"] for e in routes} == {"s-4", "s-9"}  # the opening-hours questions
    assert drift.drifted["route"] == 2
    assert any(e["recorded"] == ["hours"] and e["live"] == ["booking"] for e in routes)
    assert drift.percent("route") and drift.percent("route") > 0
    days = [e for e in drift.examples if e["decision"] == "fields" and "day" in e["what"]]
    assert any(e["recorded"] == "monday" and e["live"] == "tuesday" for e in days)
    assert drift.exceeds(0.0) and not drift.exceeds(100.0)
    assert "route" in drift.text() and "% drift" in drift.text()


class BranchJudge:
    """Answers the one branch question ("wants to cancel?") with ``cancel``."""

    def __init__(self, cancel: bool) -> None:
        self.cancel = cancel

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if request.schema_name == "speak":
            return ModelResponse(json={"message": "Which size?", "size": None})
        answer: dict[str, Any] = {"flows": {"order": 90}, "fields": {"size": None}}
        if request.meta.get("branches"):
            answer["branches"] = {"q1": self.cancel}
        return ModelResponse(json=answer)


def _ordering(provider: Any) -> Agent:
    return Agent(name="Bo", provider=provider, clock=FakeClock(), fields={"size": {
        "type": "string"}}, flows=[{
            "id": "order", "on": [{"message": ["order"]}],
            "steps": [{"id": "ask", "collect": ["size"], "prompt": "Ask the size.",
                       "branches": [{"when": "the customer wants to cancel", "then": "end"}]},
                      {"id": "done", "say": "Size {{size}}."}]}])


async def test_branch_answers_that_differ_are_counted_as_branch_drift() -> None:
    """Twelve conversations answered "cancel" when recorded and "go on" live: every branch
    answer drifts, and no route does."""
    recorder = _ordering(BranchJudge(cancel=True))
    conversations = [await record_conversation(recorder, f"b-{n}", [
        ("2026-05-01T10:00:00Z", {"message": "order", "id": "1"}),
        ("2026-05-01T10:01:00Z", {"message": "hmm", "id": "2"})]) for n in range(12)]
    assert all(c.turns[1].recorded.ended for c in conversations)  # the branch ended the run
    drift = await live_drift(recorder, conversations, provider=BranchJudge(cancel=False))
    assert drift.compared["branches"] == 12 and drift.percent("branches") == 100.0
    assert drift.percent("route") == 0.0


def test_the_command_fails_when_drift_passes_the_limit(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--model live --max-drift 5`` exits 1 for the misrouting model, 0 for the same one."""
    directory = tmp_path_factory.mktemp("live")
    for conversation in asyncio.run(_recorded(10)):
        write_golden(conversation, directory)
    assert main(["replay", "--agent", "tests.replay.agents:misrouting", "--from",
                 str(directory), "--model", "live", "--max-drift", "5"]) == 1
    assert "route" in capsys.readouterr().out
    assert main(["replay", "--agent", "tests.replay.agents:same", "--from", str(directory),
                 "--model", "live", "--max-drift", "0"]) == 0
