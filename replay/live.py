"""``--model live``: the same conversations, the model asked again, its decisions compared.

Each conversation runs again on the recorded clock, but every model call goes to a real
provider with the prompt the agent builds now. Its replies are paired with the recorded ones of
the same turn, kind and order, and three kinds of decision are compared:

    route     on a message turn where the model was asked to understand: the flows the turn
              started (what the engine made of the model's scores)
    fields    each field value the model extracted (understand ``fields`` and ``extract``,
              speak envelope values), where either side gave one
    branches  each branch question the model answered (understand ``branches``)

Drift is the share of compared decisions that differ, per kind. The conversation carries on
from the live results, so a drift early in a conversation may cause more after it: that is
what a customer would meet.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass, field
from typing import Any
from xml.etree import ElementTree

from engine import Agent, ModelRequest, ModelResponse, Provider
from engine.recording import reply_json
from replay.conversations import Conversation
from replay.runner import HISTORY_LIMIT, TurnReplay, replay_conversation
from replay.session import Progress

__all__ = ["DECISIONS", "Drift", "LiveProvider", "decisions_of", "live_drift"]

DECISIONS = ("route", "fields", "branches")
_EXAMPLES = 20


class LiveProvider:
    """Asks ``inner`` for real and pairs each reply with the recorded call it stands for."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self._recorded: dict[str, deque[dict[str, Any]]] = {}
        self.pairs: list[tuple[str, dict[str, Any] | None, dict[str, Any]]] = []
        self.calls: Counter[str] = Counter()

    def load(self, calls: list[dict[str, Any]] | None) -> None:
        self._recorded = {}
        self.pairs = []
        for call in calls or []:
            if isinstance(call, dict) and isinstance(call.get("kind"), str):
                self._recorded.setdefault(call["kind"], deque()).append(call)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.generate(request)
        self.calls[request.schema_name] += 1
        queue = self._recorded.get(request.schema_name)
        recorded = queue.popleft() if queue else None
        self.pairs.append((request.schema_name, recorded, reply_json(response)))
        return response


def _envelope(reply: dict[str, Any] | None) -> dict[str, Any]:
    if not isinstance(reply, dict):
        return {}
    envelope = reply.get("json")
    return envelope if isinstance(envelope, dict) else {}


def _section(envelope: dict[str, Any], name: str) -> dict[str, Any]:
    value = envelope.get(name)
    return value if isinstance(value, dict) else {}


def _values(kind: str, envelope: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(field values, branch answers) a reply gave, keyed by name, nulls left out."""
    if kind == "speak":
        return {k: v for k, v in envelope.items() if k != "message" and v is not None}, {}
    fields = {k: v for k, v in _section(envelope, "fields").items() if v is not None}
    for flow_id, values in _section(envelope, "extract").items():
        if isinstance(values, dict):
            fields |= {f"{flow_id}.{k}": v for k, v in values.items() if v is not None}
    branches = {k: v for k, v in _section(envelope, "branches").items() if v is not None}
    return fields, branches


def decisions_of(
    step: TurnReplay, pairs: list[tuple[str, dict[str, Any] | None, dict[str, Any]]]
) -> list[tuple[str, str, Any, Any]]:
    """(kind, what, recorded, live) for every decision this turn made on either side."""
    out: list[tuple[str, str, Any, Any]] = []
    turn = step.turn
    recorded_kinds = {c.get("kind") for c in turn.calls or [] if isinstance(c, dict)}
    live_kinds = {kind for kind, _, _ in pairs}
    if turn.kind == "message" and "understand" in recorded_kinds | live_kinds:
        before = sorted(str(s.get("flow_id")) for s in turn.recorded.started)
        after = sorted(str(s.get("flow_id")) for s in step.replayed.started) \
            if step.replayed is not None else ["(the turn failed)"]
        out.append(("route", "flows started", before, after))
    for kind, recorded, live in pairs:
        if recorded is None:
            continue
        old_fields, old_branches = _values(kind, _envelope(recorded.get("reply")))
        new_fields, new_branches = _values(kind, _envelope(live))
        for name in sorted(set(old_fields) | set(new_fields)):
            out.append(("fields", f"{kind} {name}", old_fields.get(name), new_fields.get(name)))
        for name in sorted(set(old_branches) | set(new_branches)):
            out.append(("branches", name, old_branches.get(name), new_branches.get(name)))
    return out


@dataclass
class Drift:
    """Decisions compared and drifted per kind, with examples of drift."""

    conversations: int = 0
    turns: int = 0
    compared: Counter[str] = field(default_factory=Counter)
    drifted: Counter[str] = field(default_factory=Counter)
    live_calls: Counter[str] = field(default_factory=Counter)
    failed_turns: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def add(self, session_id: str, position: int, decisions: list[tuple[str, str, Any, Any]]
            ) -> None:
        for kind, what, recorded, live in decisions:
            self.compared[kind] += 1
            if recorded != live:
                self.drifted[kind] += 1
                if len(self.examples) < _EXAMPLES:
                    self.examples.append({"session_id": session_id, "turn": position,
                                          "decision": kind, "what": what,
                                          "recorded": recorded, "live": live})

    def percent(self, kind: str) -> float | None:
        if not self.compared[kind]:
            return None
        return 100.0 * self.drifted[kind] / self.compared[kind]

    def exceeds(self, limit: float) -> bool:
        return any((self.percent(kind) or 0.0) > limit for kind in DECISIONS)

    def counts(self) -> dict[str, Any]:
        return {
            "conversations": self.conversations,
            "turns": self.turns,
            "failed_turns": self.failed_turns,
            "live_calls": dict(sorted(self.live_calls.items())),
            "decisions": {
                kind: {"compared": self.compared[kind], "drifted": self.drifted[kind],
                       "percent": self.percent(kind)}
                for kind in DECISIONS
            },
        }

    def text(self) -> str:
        lines = [f"live model: {self.conversations} conversations, {self.turns} turns, "
                 f"{sum(self.live_calls.values())} model calls"]
        for kind in DECISIONS:
            pct = self.percent(kind)
            shown = "no decisions" if pct is None else f"{pct:.1f}% drift"
            lines.append(f"  {kind:9} {shown} ({self.drifted[kind]} of {self.compared[kind]})")
        if self.failed_turns:
            lines.append(f"  {self.failed_turns} turns failed with the live model")
        for example in self.examples:
            lines.append(f"  {example['session_id']} turn {example['turn']} {example['decision']}"
                         f" {example['what']}: recorded {_show(example['recorded'])}, "
                         f"live {_show(example['live'])}")
        return "\n".join(lines)

    def json(self) -> str:
        return json.dumps({"summary": self.counts(), "examples": self.examples}, indent=2,
                          ensure_ascii=False, default=str)

    def junit(self, limit: float | None) -> str:
        suite = ElementTree.Element("testsuite", {"name": "turnflow replay --model live",
                                                  "tests": str(len(DECISIONS))})
        failures = 0
        for kind in DECISIONS:
            case = ElementTree.SubElement(suite, "testcase", {"classname": "drift", "name": kind})
            pct = self.percent(kind)
            if limit is not None and pct is not None and pct > limit:
                failures += 1
                ElementTree.SubElement(case, "failure", {
                    "message": f"{pct:.1f}% drift is above {limit:g}%"})
        suite.set("failures", str(failures))
        return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True)


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


async def live_drift(
    agent: Agent,
    conversations: AsyncIterable[Conversation] | Iterable[Conversation],
    *,
    provider: Provider | None = None,
    history_limit: int = HISTORY_LIMIT,
    progress: Progress | None = None,
) -> Drift:
    """Replay with a live model (``provider``, else the agent's own) and measure drift."""
    model = provider if provider is not None else agent.config.provider
    if model is None:
        from engine.providers import provider_from_env

        model = provider_from_env()
    drift = Drift()

    async def each(conversation: Conversation) -> None:
        live = LiveProvider(model)
        position = 0

        def on_turn(step: TurnReplay) -> None:
            nonlocal position
            position += 1
            drift.turns += 1
            if step.replayed is None:
                drift.failed_turns += 1
            drift.add(conversation.session_id, position, decisions_of(step, live.pairs))

        await replay_conversation(agent, conversation, provider=live,
                                  history_limit=history_limit, stop_at_departure=False,
                                  on_turn=on_turn)
        drift.conversations += 1
        drift.live_calls.update(live.calls)
        if progress is not None:
            progress.update(drift.conversations, f"{sum(drift.drifted.values())} drifted")

    if isinstance(conversations, AsyncIterable):
        async for conversation in conversations:
            await each(conversation)
    else:
        for conversation in conversations:
            await each(conversation)
    if progress is not None:
        progress.update(drift.conversations, f"{sum(drift.drifted.values())} drifted",
                        final=True)
    return drift
