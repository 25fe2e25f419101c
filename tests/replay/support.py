"""The demo agent and scripted conversations with it, for replay tests and the benchmark."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from engine import Agent, FakeClock
from engine.providers import Provider, RuleProvider
from examples import demo_agent

NAMES = ["Rita", "Joao", "Mei", "Omar", "Ines", "Lars", "Ada", "Bo", "Zoe", "Kai"]
SERVICES = ["tune-up", "flat-tire", "brakes"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]

Script = list[tuple[datetime, dict[str, Any]]]


def demo(
    change: Callable[[list[dict[str, Any]]], None] | None = None,
    provider: Provider | None = None,
) -> Agent:
    """The demo agent, its flows first passed through ``change`` (on a deep copy)."""
    flows = copy.deepcopy(demo_agent.FLOWS)
    if change is not None:
        change(flows)
    return Agent(
        name="Ana",
        persona="Friendly front desk of a small bike-repair shop. Short, plain sentences.",
        goal="Book repairs and answer simple questions about the shop.",
        provider=provider if provider is not None else RuleProvider(),
        clock=FakeClock(),
        fields=demo_agent.FIELDS,
        flows=flows,
        actions={"book_repair": demo_agent.book_repair},
        events={"paid": {}},
    )


def step(flows: list[dict[str, Any]], flow_id: str, step_id: str) -> dict[str, Any]:
    """The step ``flow_id/step_id`` of ``flows``, to change it in place."""
    flow = next(f for f in flows if f["id"] == flow_id)
    return next(s for s in flow["steps"] if s["id"] == step_id)


def script(n: int, start: datetime | None = None) -> Script:
    """Conversation number ``n``: a booking (some with brakes, some said no to first, some
    paid), or a question about opening hours; all on the same flows."""
    t = (start or datetime(2026, 3, 2, 9, tzinfo=UTC)) + timedelta(minutes=7 * n)
    name, service, day = NAMES[n % len(NAMES)], SERVICES[n % 3], DAYS[n % len(DAYS)]
    out: Script = []

    def say(text: str, seconds: int) -> None:
        out.append((t + timedelta(seconds=seconds), {"message": text, "id": f"m{len(out)}"}))

    if n % 5 == 4:
        say("what are your opening hours?", 0)
        return out
    say("hi", 0)
    say(f"I'm {name}", 20)
    say(f"book a {service} on {day}", 45)
    if n % 4 == 1:
        say("no", 60)
        say(f"{SERVICES[(n + 1) % 3]} on {DAYS[(n + 2) % len(DAYS)]}", 80)
    say("yes", 100)
    if n % 3 == 0:
        out.append((t + timedelta(seconds=130), {"event": "paid", "key": f"pay-{n}"}))
    return out


class Misrouting:
    """The offline provider, except that a question it would route to opening hours is
    routed to a booking, and Monday is heard as Tuesday: a model that decides differently."""

    def __init__(self) -> None:
        self.inner = RuleProvider()

    async def generate(self, request: Any) -> Any:
        response = await self.inner.generate(request)
        envelope = dict(response.json or {})
        flows = dict(envelope.get("flows") or {})
        if flows.get("hours"):
            flows["hours"], flows["booking"] = 0, 95
            envelope["flows"] = flows
        for section in ("fields",):
            values = envelope.get(section)
            if isinstance(values, dict) and values.get("day") == "monday":
                envelope[section] = {**values, "day": "tuesday"}
        if envelope.get("day") == "monday":
            envelope["day"] = "tuesday"
        return response.model_copy(update={"json_": envelope})
