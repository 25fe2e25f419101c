"""One llama.cpp server for the session, and a provider that records every call made to it.

``tests/fixtures/llama_server.py`` fetches the model into its cache on first use and starts the
server; when either fails the tests skip, or fail under ``TURNFLOW_REQUIRE_SERVERS=1``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from engine.errors import ProviderError
from engine.providers import OpenAIProvider
from engine.providers.base import ModelRequest, ModelResponse
from tests.fixtures.llama_server import MODEL_NAME, LlamaServer, start
from tests.fixtures.servers import servers_unavailable

REPLY_CAP = 128
"""Tokens one reply may take in these tests: room for every envelope, a bound on runaways."""
CALL_TIMEOUT_S = 240.0
"""Generous: on a busy two-core machine the tiny model writes a few tokens a second."""


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    try:
        server = start(tmp_path_factory.mktemp("llama") / "server.log")
    except RuntimeError as exc:
        servers_unavailable(f"llama.cpp server: {exc}")
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Call:
    """One model call: what was asked, and the reply or the error it ended in."""

    request: ModelRequest
    response: ModelResponse | None = None
    error: ProviderError | None = None


@dataclass
class Recorder:
    """Forwards every call to the real provider and keeps it, with the request bodies sent."""

    inner: OpenAIProvider
    calls: list[Call] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        call = Call(request)
        self.calls.append(call)
        try:
            call.response = await self.inner.generate(request)
        except ProviderError as exc:
            call.error = exc
            raise
        return call.response

    def of(self, kind: str) -> list[Call]:
        return [c for c in self.calls if c.request.schema_name == kind]


async def recording(server: LlamaServer, **options: Any) -> AsyncIterator[Recorder]:
    """A ``Recorder`` over an ``OpenAIProvider`` pointed at ``server``."""
    bodies: list[dict[str, Any]] = []

    async def keep(request: httpx.Request) -> None:
        import json

        bodies.append(json.loads(request.content))

    client = httpx.AsyncClient(timeout=CALL_TIMEOUT_S, event_hooks={"request": [keep]})
    settings: dict[str, Any] = {"model": MODEL_NAME, "base_url": server.base_url,
                                "timeout": CALL_TIMEOUT_S, "temperature": 0.0,
                                "max_tokens": REPLY_CAP, "env": {}, **options}
    provider = OpenAIProvider(client=client, **settings)
    try:
        yield Recorder(provider, bodies=bodies)
    finally:
        await client.aclose()


@pytest.fixture
async def recorder(llama_server: LlamaServer) -> AsyncIterator[Recorder]:
    async for made in recording(llama_server):
        yield made
