"""A tiny in-memory host for the example tests: it keeps the session, the history and the timers
the way the service does, and moves a fake clock so timers fire without waiting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from engine import Agent, FakeClock, TurnResult

CONVERSE_START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@dataclass
class Conversation:
    """One session driven through ``agent.turn`` with save-then-schedule done in memory."""

    agent: Agent
    clock: FakeClock
    session_id: str = "s1"
    session: Any = None
    history: list[dict[str, Any]] = field(default_factory=list)
    timers: dict[str, datetime] = field(default_factory=dict)
    inputs: int = 0

    async def say(self, text: str) -> TurnResult:
        """The customer writes ``text`` (a moment before the turn runs, as a channel reports)."""
        self.inputs += 1
        at = self.clock.now() - timedelta(milliseconds=200)
        result = await self._turn(
            {"message": text, "id": f"m{self.inputs}", "at": at.isoformat()}
        )
        self.history.append({"role": "user", "text": text})
        return self._after(result)

    async def event(self, name: str, payload: dict[str, Any] | None = None) -> TurnResult:
        self.inputs += 1
        return self._after(
            await self._turn({"event": name, "payload": payload or {}, "key": f"e{self.inputs}"})
        )

    async def wait(self, seconds: float) -> list[tuple[str, TurnResult]]:
        """Move the clock; every timer due by then fires as a wake, earliest first."""
        deadline = self.clock.now() + timedelta(seconds=seconds)
        fired: list[tuple[str, TurnResult]] = []
        while True:
            due = sorted((at, key) for key, at in self.timers.items() if at <= deadline)
            if not due:
                break
            at, key = due[0]
            del self.timers[key]
            self.clock.set(max(at, self.clock.now()))
            fired.append((key, self._after(await self._turn({"wake": key}))))
        self.clock.set(deadline)
        return fired

    async def _turn(self, request: dict[str, Any]) -> TurnResult:
        return await self.agent.turn(
            {"session_id": self.session_id, "session": self.session, "history": self.history,
             **request}
        )

    def _after(self, result: TurnResult) -> TurnResult:
        self.session = result.session
        self.history.extend({"role": "assistant", "text": m.text} for m in result.messages)
        for entry in result.schedule:
            if entry.replaces:
                self.timers.pop(entry.replaces, None)
            self.timers[entry.key] = entry.at
        self.clock.advance(seconds=1)
        return result


def texts(result: TurnResult) -> list[str]:
    return [m.text for m in result.messages]


def codes(result: TurnResult) -> list[tuple[str | None, str | None]]:
    return [(o.step_id, o.code) for o in result.outcomes]


async def converse(
    agent: Any,
    session_id: str,
    texts: list[str],
    on_turn: Callable[[str, TurnResult], None] | None = None,
) -> None:
    """A customer's ``texts`` through ``agent.turn`` one minute apart, each request carrying the
    session and the history so far (the host loop of the prompt-prefix test and benchmark, whose
    subject is the prompts the model is sent, not timers)."""
    history: list[dict[str, Any]] = []
    session: Any = None
    for i, text in enumerate(texts):
        at = CONVERSE_START + timedelta(minutes=i)
        request: dict[str, Any] = {"session_id": session_id, "message": text,
                                   "id": f"{session_id}-{i}", "history": list(history)}
        if session is not None:
            request["session"] = session
        result = await agent.turn(request)
        session = result.session
        history.append({"role": "user", "text": text, "at": at})
        history += [{"role": "assistant", "text": m.text, "at": at}
                    for m in result.messages if m.text]
        if on_turn is not None:
            on_turn(text, result)
