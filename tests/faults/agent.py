"""The agent the fault tests run in a real ``turnflow consume`` process.

A code-only engine agent (no model) whose replies number the inputs applied to a session:
``count`` adds one to ``n``, the reply says ``"<n>:<label>"`` verbatim, and the run waits an
hour, which writes a timer to ``outbound.schedule``. A lost, doubled or reordered input shows in
the reply texts. Around it, per input, the input's ``context`` may ask for:

- ``delay_ms``: sleep before the turn (a slow model for this session);
- ``poison``: raise ``PoisonInputError`` every time (an input no retry can fix).

``AGENT=tests.faults.agent:fault_agent``. ``timer_agent`` is the same agent waiting only
``FAULT_TIMER_MS`` milliseconds: when that timer fires its turn says ``"<n>:woke"`` and the run
ends (``AGENT=tests.faults.agent:timer_agent``, with a scheduler process running).

``echo_agent`` answers through a model instead (``EchoModel``, which says back the messages of
the turn): every message starts a run of its own, and a burst's reply names each message it
answers, so messages without a ``context`` of their own may merge and a test can see which
inputs each reply answered (``AGENT=tests.faults.agent:echo_agent``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from engine import Agent, FakeClock, ModelRequest, ModelResponse, ok
from engine.providers.rules import message_parts

__all__ = [
    "EchoModel",
    "FaultAgent",
    "PoisonInputError",
    "counting_agent",
    "echo_agent",
    "fault_agent",
    "timer_agent",
]


class PoisonInputError(RuntimeError):
    """Raised for an input marked ``poison``: it fails on every attempt."""


def counting_agent(timer_ms: int | None = None) -> Agent:
    """A code-only agent whose verbatim replies are ``"<inputs applied>:<label>"``; with
    ``timer_ms`` its wait fires after that long and says ``"<inputs applied>:woke"``."""

    async def count(ctx: Any) -> Any:
        return ok(data={
            "n": int(ctx.data.get("n") or 0) + 1,
            "last": str(ctx.context.get("label", "")),
        })

    async def woken(ctx: Any) -> Any:
        return ok(data={"last": "woke"})

    return Agent(
        name="Contadora",
        fields={"n": {"type": "integer"}, "last": {"type": "string"}},
        actions={"count": count, "woken": woken},
        flows=[{
            "id": "count",
            "on": [{"message": []}],
            "steps": [
                {"id": "c", "do": "count"},
                {"id": "say", "say": "{{n}}:{{last}}"},
                {"id": "w", "wait": {"ms": timer_ms or 3_600_000},
                 "then": "woken" if timer_ms else "end", "else": "c"},
                # A ``do`` after the wait: a short wait followed by a ``say`` is an inline delay
                # of the reply, not a timer.
                *([{"id": "woken", "do": "woken"}, {"id": "woke", "say": "{{n}}:woke"}]
                  if timer_ms else []),
            ],
        }],
    )


class FaultAgent:
    """The counting agent behind the per-input ``delay_ms`` and ``poison`` switches."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    @property
    def config(self) -> Any:
        return self._agent.config

    async def turn(self, request: dict[str, Any]) -> Any:
        context = request.get("context") or {}
        if context.get("poison"):
            raise PoisonInputError("this input always fails")
        delay_ms = int(context.get("delay_ms") or 0)
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        return await self._agent.turn(request)


def fault_agent() -> FaultAgent:
    """What ``--agent tests.faults.agent:fault_agent`` loads."""
    return FaultAgent(counting_agent())


def timer_agent() -> FaultAgent:
    """What ``--agent tests.faults.agent:timer_agent`` loads: timers of ``FAULT_TIMER_MS``."""
    return FaultAgent(counting_agent(int(os.environ["FAULT_TIMER_MS"])))


class EchoModel:
    """A model that answers every turn with the customer's messages of that turn
    (``re:m3|m4``), so a reply's text names exactly the inputs it answers; it never fills a
    field."""

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if request.schema_name == "speak":
            return ModelResponse(json={"message": "re:" + "|".join(message_parts(request.meta))})
        return ModelResponse(json={})


# Every message starts a run of its own: replies are keyed ``r{n}@{tag}:ack:1``.
EACH_MESSAGE_A_RUN: dict[str, Any] = {
    "id": "ack", "on": [{"message": []}],
    "steps": [{"id": "ack", "prompt": "Answer the customer."}],
}


def echo_agent(flow: dict[str, Any] | None = None, *, clock: Any = None) -> Agent:
    """What ``--agent tests.faults.agent:echo_agent`` loads: ``flow`` answered by
    ``EchoModel`` (one run per message unless another flow is given)."""
    return Agent(
        name="Eco", provider=EchoModel(), clock=clock,
        flows=[flow or EACH_MESSAGE_A_RUN],
        fields={"day": {"type": "string", "ask": "Which day?"}},
    )


def fake_clock() -> FakeClock:
    """A fixed clock for tests that run ``echo_agent`` in their own process."""
    return FakeClock("2026-01-05T09:00:00Z")
