"""Lifecycle step 5: the reasoning loop reads the last 20 turns of the conversation, not all the
history the host gives it."""

from __future__ import annotations

import asyncio
from typing import Any

from engine import Agent, FakeClock
from tests.scenarios.lifecycle_support import (
    CHAT_FLOW,
    START,
    EchoProvider,
    conversation,
    lifecycle_agent,
    message,
    said,
)


def history(turns: int, tag: str = "") -> list[dict[str, Any]]:
    """``turns`` earlier turns, each a customer message and the agent's reply."""
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out += [{"role": "user", "text": f"{tag}pergunta {i}"},
                {"role": "assistant", "text": f"{tag}resposta {i}"}]
    return out


async def test_only_the_last_twenty_turns_reach_the_speak_call() -> None:
    """Thirty earlier turns: the call reads turns 11-29 and this message (20 customer turns)."""
    agent, provider = lifecycle_agent([said("Ok.")], {})
    await agent.turn(message("agora", "m1", history=history(30)))
    sent = provider.calls[0].messages
    users = [m.text for m in sent if m.role == "user"]
    assert len(users) == 20
    assert users[0] == "pergunta 11" and users[-1] == "agora"
    assert sent[0].text == "pergunta 11" and sent[1].text == "resposta 11"


async def test_a_shorter_history_is_read_whole() -> None:
    """Nineteen earlier turns plus this message: nothing is cut."""
    agent, provider = lifecycle_agent([said("Ok.")], {})
    await agent.turn(message("agora", "m1", history=history(19)))
    assert len(provider.calls[0].messages) == 39


async def test_an_agent_without_lifecycle_settings_reads_all_it_is_given() -> None:
    """The engine alone keeps the host's history as it came."""
    agent, provider = lifecycle_agent([said("Ok.")], None)
    await agent.turn(message("agora", "m1", history=history(30)))
    assert len([m for m in provider.calls[0].messages if m.role == "user"]) == 31


async def test_many_conversations_each_read_their_own_last_twenty_turns() -> None:
    """Twenty-five conversations with histories of different lengths at once: every call reads
    only its own conversation's messages, at most 20 turns of them."""
    provider = EchoProvider()
    agent = Agent(name="Ana", provider=provider, clock=FakeClock(START), flows=[CHAT_FLOW],
                  lifecycle={})
    lengths = {f"s{i}": i * 2 for i in range(25)}
    await asyncio.gather(*(
        agent.turn(conversation(sid, f"{sid}: agora", f"{sid}-m1",
                                history=history(n, tag=f"{sid}/")))
        for sid, n in lengths.items()))
    assert len(provider.calls) == 25
    for call in provider.calls:
        users = [m.text for m in call.messages if m.role == "user"]
        sid = users[-1].split(":")[0]
        assert all(m.text.startswith(f"{sid}/") for m in call.messages[:-1])
        kept = min(lengths[sid], 19)
        assert len(users) == kept + 1
        if kept:
            assert users[0] == f"{sid}/pergunta {lengths[sid] - kept}"
