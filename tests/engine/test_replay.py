"""Replay: committed histories of inputs and results must replay to the same results.

``replays/*.json`` each hold the inputs of a conversation (with the clock's time per input)
and the results the engine produced. Replaying them against the same agent must give the same
results, byte for byte in JSON; ``replays/diverged.json`` was recorded against a different
greeting and must fail to replay. Regenerate with ``TURNFLOW_UPDATE_REPLAYS=1`` and read the
diff: a change here is a change in behaviour every stored session will see.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from engine import Agent, FakeClock, MockProvider, ok

REPLAYS = Path(__file__).parent / "replays"

FLOWS: list[dict[str, Any]] = [
    {
        "id": "welcome",
        "on": [{"message": []}],
        "steps": [
            {"id": "hi", "say": "Oi! Sou a Ana.", "once": True},
            {"id": "note", "do": "note", "with": {"who": "{{context.channel}}"}},
            {"id": "wait", "wait": {"ms": 120_000}, "else": "back"},
            {"id": "nudge", "say": "Ainda por aí?", "then": "end"},
            {"id": "back", "say": "Que bom que voltou."},
        ],
    },
    {
        "id": "paid",
        "on": [{"event": "payment", "after_ms": 5000}],
        "steps": [{"id": "thanks", "say": "Pagamento de {{input.amount}} recebido."}],
    },
    {
        "id": "nudge",
        "on": [{"silence": 300_000}],
        "repeat": "once",
        "steps": [{"id": "n", "say": "Posso ajudar em algo mais?"}],
    },
]

CONVERSATION: list[tuple[str, dict[str, Any]]] = [
    ("2026-01-05T09:00:00Z", {"message": "oi", "id": "m1", "context": {"channel": "wa"}}),
    ("2026-01-05T09:01:00Z", {"message": "tudo bem?", "id": "m2"}),
    ("2026-01-05T09:02:00Z", {"event": "payment", "key": "p1", "payload": {"amount": 30}}),
    ("2026-01-05T09:02:05Z", {"wake": 3}),
    ("2026-01-05T09:07:05Z", {"wake": 4}),
    ("2026-01-05T09:08:00Z", {"message": "oi", "id": "m1"}),
]


def agent(clock: FakeClock, greeting: str = "Oi! Sou a Ana.") -> Agent:
    flows = json.loads(json.dumps(FLOWS))
    flows[0]["steps"][0]["say"] = greeting
    return Agent(
        name="Ana",
        provider=MockProvider([]),
        clock=clock,
        flows=flows,
        actions={"note": lambda ctx: ok()},
        events={"payment": {}},
        idle="silent",
    )


def play(inputs: list[tuple[str, dict[str, Any]]], greeting: str) -> list[dict[str, Any]]:
    """Run the inputs like a host: store the session as JSON, fire wakes by their index."""

    async def run() -> list[dict[str, Any]]:
        clock = FakeClock(inputs[0][0])
        bot = agent(clock, greeting)
        stored: dict[str, Any] | None = None
        wakes: list[str] = []
        out = []
        for at, spec in inputs:
            clock.set(at)
            request = {"session_id": "s1", "session": stored, **spec}
            if "wake" in spec:
                request["wake"] = wakes[spec["wake"]]
            result = await bot.turn(request)
            wakes += [entry.key for entry in result.schedule]
            stored = result.session.model_dump(mode="json")
            out.append(result.model_dump(mode="json"))
        return out

    return asyncio.run(run())


def recorded(name: str, greeting: str) -> dict[str, Any]:
    path = REPLAYS / name
    if os.environ.get("TURNFLOW_UPDATE_REPLAYS") == "1":
        history = {
            "inputs": CONVERSATION,
            "greeting": greeting,
            "results": play(CONVERSATION, greeting),
        }
        path.write_text(json.dumps(history, indent=2, ensure_ascii=False) + "\n", "utf-8")
    assert path.exists(), f"no replay {name}; run with TURNFLOW_UPDATE_REPLAYS=1"
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data


def test_a_committed_history_replays_to_the_same_results() -> None:
    """Code behaves the same on a replay: the same inputs give the same results."""
    history = recorded("conversation.json", "Oi! Sou a Ana.")
    inputs = [(at, spec) for at, spec in history["inputs"]]
    assert play(inputs, "Oi! Sou a Ana.") == history["results"]
    texts = [m["text"] for r in history["results"] for m in r["messages"]]
    assert "Pagamento de 30 recebido." in texts and history["results"][-1]["changed"] is False


def test_a_history_recorded_against_other_behaviour_fails_to_replay() -> None:
    """A replay against changed flows must be caught, not silently accepted."""
    history = recorded("diverged.json", "Olá! Aqui é a Ana.")
    inputs = [(at, spec) for at, spec in history["inputs"]]
    with pytest.raises(AssertionError):
        assert play(inputs, "Oi! Sou a Ana.") == history["results"]
