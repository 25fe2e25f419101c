"""Several conversations of the demo agent at once through one provider and one real server:
nothing of one conversation reaches another's calls, replies or keys."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from engine import FakeClock, ProviderError
from engine.providers.base import ModelRequest, ModelResponse
from examples.demo_agent import build_agent
from tests.examples.host import Conversation
from tests.fixtures.llama_server import LlamaServer
from tests.real_model.conftest import recording
from tests.real_model.test_protocol import START, assert_no_broken_json_sent

pytestmark = [pytest.mark.real_model_slow, pytest.mark.timeout(900)]

NAMES = ["Quentin", "Rosalind", "Tobias"]


@dataclass
class Tagged:
    """One conversation's view of the shared provider: the requests it made."""

    inner: object
    requests: list[ModelRequest] = field(default_factory=list)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await self.inner.generate(request)  # type: ignore[attr-defined, no-any-return]


async def test_concurrent_conversations_stay_apart(llama_server: LlamaServer) -> None:
    """Three conversations, the same flows, at the same time against the server's two slots:
    each one's model calls carry only its own customer's words, its replies keep its own
    session's keys, and no broken reply is sent."""
    async for shared in recording(llama_server):
        views = [Tagged(shared) for _ in NAMES]
        clocks = [FakeClock(START) for _ in NAMES]
        chats = [Conversation(build_agent(view, clock), clock,  # type: ignore[arg-type]
                              session_id=f"s-{name.lower()}")
                 for view, clock, name in zip(views, clocks, NAMES, strict=True)]

        async def talk(chat: Conversation, name: str) -> list[object]:
            results = []
            for text in (f"hi, my name is {name}", f"{name} wants the brakes fixed on saturday"):
                try:
                    results.append(await chat.say(text))
                except ProviderError as exc:  # an understand reply cut off: the host retries
                    assert exc.kind == "retryable" and "unusable reply" in str(exc)
            return results

        outcomes = await asyncio.gather(*(talk(c, n) for c, n in zip(chats, NAMES, strict=True)))
        for view, chat, name, results in zip(views, chats, NAMES, outcomes, strict=True):
            others = [other for other in NAMES if other != name]
            assert view.requests, name
            for request in view.requests:
                words = " ".join(m.text for m in request.messages) + request.system
                assert not [other for other in others if other in words], (name, words)
            for result in results:
                assert result.session.id == chat.session_id
                for message in result.messages:
                    assert not [other for other in others if other.lower() in message.key]
            assert_no_broken_json_sent(results)
        assert len(shared.calls) == sum(len(v.requests) for v in views)
