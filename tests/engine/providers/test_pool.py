"""The provider's connection pool: many calls at once keep their connections alive and reuse
them, each call still gets its own answer, and the pool refuses a size it cannot have."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from engine.providers import OpenAIProvider
from engine.providers.base import ChatMessage, ModelRequest
from engine.providers.pool import ShardedTransport
from tests.fixtures.stand_in_model import _handle

AT_ONCE = 48
ROUNDS = 3
SCHEMA = {"type": "object", "properties": {"message": {"type": "string"}},
          "required": ["message"], "additionalProperties": False}


@dataclass
class CountingServer:
    """The stand-in model server in this event loop, keeping connections alive and counting
    the connections it accepted."""

    base_url: str = ""
    accepted: int = 0


@pytest.fixture
async def server() -> AsyncIterator[CountingServer]:
    counting = CountingServer()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counting.accepted += 1
        await _handle(reader, writer, 0.05, (None, None), keep_alive=True)

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    counting.base_url = f"http://127.0.0.1:{port}/v1"
    async with listening:
        yield counting


def _request(customer: int) -> ModelRequest:
    return ModelRequest(schema_name="speak", system="You are Ana.",
                        messages=[ChatMessage(role="user", text=f"customer {customer}")],
                        json_schema=SCHEMA)


async def _bursts(provider: OpenAIProvider, server: CountingServer) -> list[int]:
    """Connections the server accepted after each round of ``AT_ONCE`` calls at once; every
    call must get the answer to its own request."""
    after: list[int] = []
    for _ in range(ROUNDS):
        replies = await asyncio.gather(*(provider.generate(_request(i)) for i in range(AT_ONCE)))
        assert [(reply.json_ or {}).get("message") for reply in replies] == [
            f"echo: customer {i}" for i in range(AT_ONCE)
        ]
        after.append(server.accepted)
    return after


async def test_many_calls_at_once_reuse_their_connections(server: CountingServer) -> None:
    async with OpenAIProvider("", model="m", base_url=server.base_url) as provider:
        accepted = await _bursts(provider, server)
    assert accepted[0] <= AT_ONCE
    assert accepted[1:] == [accepted[0]] * (ROUNDS - 1), "later rounds opened new connections"


async def test_connections_cap_holds_and_calls_wait_for_one(server: CountingServer) -> None:
    async with OpenAIProvider("", model="m", base_url=server.base_url,
                              connections=10) as provider:
        accepted = await _bursts(provider, server)
    assert accepted == [accepted[0]] * ROUNDS
    assert accepted[0] <= 10


def test_transport_spreads_connections_over_small_pools() -> None:
    assert ShardedTransport(100).shards == 7
    assert ShardedTransport(16).shards == 1
    assert ShardedTransport(1).shards == 1


@pytest.mark.parametrize("connections", [0, -3])
def test_refuses_a_pool_without_connections(connections: int) -> None:
    with pytest.raises(ValueError, match="at least"):
        ShardedTransport(connections)
    with pytest.raises(ValueError, match="at least 1"):
        OpenAIProvider("", model="m", base_url="http://127.0.0.1:1/v1", connections=connections)
