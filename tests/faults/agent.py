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
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from engine import Agent, ok

__all__ = ["FaultAgent", "PoisonInputError", "counting_agent", "fault_agent", "timer_agent"]


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
