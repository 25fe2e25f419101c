"""Slot affinity on llama.cpp: each conversation's understand and speak calls carry an
``id_slot`` of their own pair of server slots, the pair picked by the conversation."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import FakeClock, ModelRequest, ModelResponse
from engine.providers import OpenAIProvider
from engine.providers.base import ChatMessage
from engine.providers.openai import chat_completion_body
from engine.providers.rules import RuleProvider
from engine.providers.slots import slot_for
from examples.demo_agent import build_agent
from tests.engine.providers.conftest import Canned, CannedServer
from tests.engine.providers.test_openai import completion


def test_each_kind_of_a_conversation_keeps_its_slot_of_one_pair() -> None:
    """Understand takes the even slot and speak the odd slot of one pair, the same pair on
    every call of the conversation; with fewer than two slots, no conversation, or another
    call kind, the server picks."""
    for slots in (2, 3, 4, 8, 64):
        for conversation in ("s-1", "s-2", "ünïcode", ""):
            understand = slot_for("understand", conversation, slots)
            speak = slot_for("speak", conversation, slots)
            assert understand is not None and speak is not None
            assert understand % 2 == 0 and speak == understand + 1 < slots
            assert slot_for("understand", conversation, slots) == understand
    assert slot_for("understand", "s-1", 1) is None and slot_for("speak", "s-1", 0) is None
    assert slot_for("speak", None, 4) is None
    assert {slot_for(kind, "s-1", 4) for kind in ("compact", "skills", "vision")} == {None}


def test_conversations_spread_over_the_pairs() -> None:
    """Conversations land on every pair of a server's slots, none favoured by more than a
    fifth over an even share: concurrent conversations rarely share a slot."""
    slots = 8
    counts = [0] * (slots // 2)
    for i in range(4000):
        slot = slot_for("understand", f"session-{i}", slots)
        assert slot is not None
        counts[slot // 2] += 1
    assert min(counts) > 1000 * 0.8 and max(counts) < 1000 * 1.2


@settings(max_examples=300, deadline=None)
@given(conversation=st.one_of(st.none(), st.text()), slots=st.integers(-5, 5000),
       kind=st.sampled_from(["understand", "speak", "compact", "skills", "vision"]))
def test_any_conversation_gets_a_slot_in_range_or_none(conversation: str | None, slots: int,
                                                       kind: str) -> None:
    """Any session id (lone surrogates included) and slot count gives a slot within the
    server's slots, or None, never an exception."""
    slot = slot_for(kind, conversation, slots)
    assert slot is None or 0 <= slot < slots


class Bodies:
    """The rule provider, keeping the chat-completions body of every call with 4 slots."""

    def __init__(self) -> None:
        self.inner = RuleProvider()
        self.bodies: list[tuple[ModelRequest, dict[str, Any]]] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.bodies.append((request, chat_completion_body(request, model="m", slots=4)))
        await asyncio.sleep(0)
        return await self.inner.generate(request)


def _two_conversations_on_different_pairs() -> tuple[str, str]:
    first = "s-a"
    second = next(f"s-b{i}" for i in range(100)
                  if slot_for("speak", f"s-b{i}", 4) != slot_for("speak", first, 4))
    return first, second


def test_two_conversations_at_once_follow_the_scheme() -> None:
    """Two demo conversations at once: every understand and speak body carries the slot the
    scheme gives its own conversation (different pairs for the two here), never the other's."""
    provider = Bodies()
    agent = build_agent(provider=provider, clock=FakeClock(datetime(2026, 1, 5, 9, tzinfo=UTC)))
    sessions = _two_conversations_on_different_pairs()

    async def talk(session_id: str) -> None:
        session: Any = None
        for i, text in enumerate(["hi", "I need the brakes fixed on saturday", "yes"]):
            request: dict[str, Any] = {"session_id": session_id, "message": text,
                                       "id": f"{session_id}-{i}"}
            if session is not None:
                request["session"] = session
            session = (await agent.turn(request)).session

    async def both() -> None:
        await asyncio.gather(*(talk(s) for s in sessions))

    asyncio.run(both())
    seen: dict[str, set[int]] = {s: set() for s in sessions}
    for request, body in provider.bodies:
        assert request.conversation in sessions
        if request.schema_name in ("understand", "speak"):
            assert body["id_slot"] == slot_for(request.schema_name, request.conversation, 4)
            seen[request.conversation].add(body["id_slot"])
        else:
            assert "id_slot" not in body
    first, second = (seen[s] for s in sessions)
    assert len(first) == 2 and len(second) == 2 and not first & second


async def test_the_provider_sends_id_slot_only_with_slots_set(
    canned_server: CannedServer,
) -> None:
    """An OpenAIProvider with slots sends the conversation's id_slot; without, none."""
    request = ModelRequest(schema_name="speak", system="You are Ana.", conversation="s-1",
                           messages=[ChatMessage(role="user", text="oi")])
    for slots in (4, 0):
        canned_server.queue(Canned(body=completion("Oi!")))
        async with OpenAIProvider(model="local", base_url=canned_server.url + "/v1", env={},
                                  slots=slots) as provider:
            await provider.generate(request)
    with_slots, without = canned_server.received
    assert with_slots.body["id_slot"] == slot_for("speak", "s-1", 4)
    assert "id_slot" not in without.body
