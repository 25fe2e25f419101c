"""Builders for the lifecycle scenarios (seed 002): an agent with one catch-all talk step."""

from __future__ import annotations

import asyncio
from typing import Any

from engine import Agent, FakeClock, MockProvider, ModelResponse, ToolCall, TurnResult

START = "2026-01-05T09:00:00Z"

CHAT_FLOW: dict[str, Any] = {
    "id": "chat",
    "name": "Atendimento",
    "on": [{"message": []}],
    "steps": [{"id": "talk", "prompt": "Ajude o cliente."}],
}


def lifecycle_agent(
    script: list[Any], lifecycle: dict[str, Any] | None, **config: Any
) -> tuple[Agent, MockProvider]:
    """An agent whose every message starts the catch-all and costs one speak call."""
    provider = MockProvider(script)
    config.setdefault("flows", [CHAT_FLOW])
    agent = Agent(
        name="Ana", provider=provider, clock=FakeClock(START), lifecycle=lifecycle, **config
    )
    return agent, provider


def said(text: str) -> dict[str, Any]:
    """A speak reply carrying ``text``."""
    return {"message": text}


def calls(*names_and_args: tuple[str, dict[str, Any]], text: str = "") -> ModelResponse:
    """A model response asking for tool calls, in order."""
    return ModelResponse(
        text=text,
        tool_calls=[
            ToolCall(id=f"c{i}", name=name, arguments=args)
            for i, (name, args) in enumerate(names_and_args, start=1)
        ],
    )


def message(
    text: str, msg_id: str, result: TurnResult | None = None, **extra: Any
) -> dict[str, Any]:
    """A message turn continuing ``result``'s session."""
    request: dict[str, Any] = {"session_id": "s1", "message": text, "id": msg_id, **extra}
    if result is not None:
        request["session"] = result.session
    return request


def tool_texts(request: Any) -> list[str]:
    """The tool results a speak request carries back to the model, in order."""
    return [m.text for m in request.messages if m.role == "tool"]


def offered(request: Any) -> list[str]:
    """The tool names a request offered."""
    return [t.name for t in request.tools]


class ExpiredTimer:
    """A speak timer whose time is already up: the first await inside it times out.

    It records the budgets (in seconds) the engine asked it for."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    def __call__(self, seconds: float) -> Any:
        self.asked.append(seconds)
        return asyncio.timeout(0)


class SlowProvider:
    """A provider that awaits before answering, so an expired timer catches it."""

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: Any) -> ModelResponse:
        self.calls += 1
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return ModelResponse(json={"message": "tarde demais"})


class EchoProvider:
    """A provider that answers every speak call with the customer's latest message, so many
    conversations can share it and each reply shows which conversation it answers.

    ``classify`` answers the skill classifier's calls (``schema_name == "skills"``)."""

    def __init__(self, classify: Any = None) -> None:
        self.calls: list[Any] = []
        self.classify = classify

    async def generate(self, request: Any) -> ModelResponse:
        self.calls.append(request)
        await asyncio.sleep(0)  # let the other conversations interleave
        if request.schema_name == "skills":
            return ModelResponse(json=self.classify(request) if self.classify else {})
        users = [m.text for m in request.messages if m.role == "user"]
        return ModelResponse(json={"message": f"eco: {users[-1] if users else ''}"})


def conversation(session_id: str, text: str, msg_id: str,
                 result: TurnResult | None = None, **extra: Any) -> dict[str, Any]:
    """A message turn of conversation ``session_id``, continuing ``result`` when given."""
    request: dict[str, Any] = {"session_id": session_id, "message": text, "id": msg_id, **extra}
    if result is not None:
        request["session"] = result.session
    return request
