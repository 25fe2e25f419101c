"""The provider's connection pool: many calls at once keep their connections alive and reuse
them, each call still gets its own answer, and the pool refuses a size it cannot have. Over
real sockets: the transport never reads a body ahead of its caller, so a huge body is cut at
the reply bound, and a pool is counted free once its reply is read, refused, cancelled or
timed out, and only once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from engine.errors import ProviderError, UnusableReply
from engine.providers import OpenAIProvider
from engine.providers.base import ChatMessage, ModelRequest
from engine.providers.http import JsonApi
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


# --- The transport over real sockets: bodies streamed, never read ahead, pools counted free ---

BOUND = 80 * 1024
HUGE = 50_000_000
CHUNK = 64 * 1024


@dataclass
class LocalServer:
    """A real HTTP/1.1 server on a local socket, in this event loop; the path picks the answer:

    ``/echo``      after 50 ms, ``{"id": ...}`` with the request's own id; keeps connections
    ``/endless``   200, chunked, a JSON string that goes on for ``HUGE`` bytes
    ``/declared``  200, ``Content-Length: HUGE``, then as many bytes as it can send
    ``/stall``     200, ``Content-Length: 1000``, ten bytes, then nothing

    It counts the connections it accepted and the body bytes it handed to each socket."""

    base_url: str = ""
    accepted: int = 0
    sent: int = 0
    finished: int = 0
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.writers.append(writer)
        try:
            while await self._answer(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        path = head[0].split(" ")[1]
        length = next((int(line.split(":", 1)[1]) for line in head[1:]
                       if line.lower().startswith("content-length:")), 0)
        body = json.loads(await reader.readexactly(length)) if length else {}
        if path.endswith("/echo"):
            await asyncio.sleep(0.05)
            data = json.dumps({"id": body.get("id")}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
            await writer.drain()
            return True
        if path.endswith("/stall"):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b'{"a": "xxx')
            await writer.drain()
            self.stalled.set()
            await reader.read(1)  # until the client goes
            return False
        chunked = path.endswith("/endless")
        framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % HUGE
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s\r\n\r\n" % framing)
        piece = b"x" * CHUNK
        while self.sent < HUGE:
            data = b'{"a": "' if self.sent == 0 else piece
            writer.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            await writer.drain()
            self.sent += len(data)
        if chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.finished += 1
        return False


@pytest.fixture
async def local() -> AsyncIterator[LocalServer]:
    server = LocalServer()
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.base_url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
    async with listening:
        yield server
        for writer in server.writers:
            writer.close()


class CountingTransport(httpx.AsyncBaseTransport):
    """Passes requests to ``inner`` and counts the body bytes read through it."""

    def __init__(self, inner: ShardedTransport) -> None:
        self.inner = inner
        self.read = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Counted(response.stream, self)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Counted(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, counter: CountingTransport) -> None:
        self._stream, self._counter = stream, counter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._counter.read += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def _api(server: LocalServer, transport: httpx.AsyncBaseTransport,
         timeout: float = 10.0) -> JsonApi:
    return JsonApi(provider="p", base_url=server.base_url, headers={}, secrets=(),
                   timeout=timeout, transport=transport)


@pytest.mark.parametrize("path", ["endless", "declared"])
async def test_a_huge_body_over_a_socket_is_refused_at_the_bound(
    local: LocalServer, path: str
) -> None:
    """50 MB offered, chunked without a length or declared: ``UnusableReply`` within a second
    or so, at most the bound and a chunk or two read off the connection (none when the length
    said it all), the server never got to send it all, and the pool is counted free."""
    pool = ShardedTransport(8)
    counting = CountingTransport(pool)
    api = _api(local, counting)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(20):  # a transport reading the whole body would take this long
        with pytest.raises(UnusableReply, match=f"over the {BOUND} its token cap allows"):
            await api.post(path, {}, max_reply_bytes=BOUND)
    elapsed = loop.time() - started
    if path == "endless":
        assert BOUND < counting.read <= BOUND + 2 * CHUNK
    else:
        assert counting.read == 0
    assert pool.busy == (0,)
    await api.aclose()
    for _ in range(100):  # the server's next writes fail once the client has hung up
        await asyncio.sleep(0.02)
        if local.writers and all(w.is_closing() for w in local.writers):
            break
    assert local.finished == 0 and local.sent < HUGE
    assert elapsed < 10, elapsed


async def test_two_hundred_calls_at_once_each_get_their_own_reply(local: LocalServer) -> None:
    """200 calls at once over 64 connections (4 pools of 16): each reply carries its own
    request's id, no more than 64 connections are opened, and every pool ends free."""
    pool = ShardedTransport(64)
    api = _api(local, pool)
    for _ in range(2):
        replies = await asyncio.gather(*(api.post("echo", {"id": f"call-{i}"})
                                         for i in range(200)))
        assert [reply["id"] for reply in replies] == [f"call-{i}" for i in range(200)]
        assert pool.busy == (0, 0, 0, 0)
    assert local.accepted <= 64
    await api.aclose()


async def test_a_call_cancelled_mid_body_frees_its_pool(local: LocalServer) -> None:
    """Counted busy while its body is being read; cancelled there, the pool is free again."""
    pool = ShardedTransport(8)
    api = _api(local, pool)
    call = asyncio.create_task(api.post("stall", {}, max_reply_bytes=BOUND))
    await local.stalled.wait()
    await asyncio.sleep(0.05)
    assert pool.busy == (1,)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert pool.busy == (0,)
    await api.aclose()


async def test_a_call_timing_out_mid_body_frees_its_pool(local: LocalServer) -> None:
    pool = ShardedTransport(8)
    api = _api(local, pool, timeout=0.3)
    with pytest.raises(ProviderError, match=r"no answer within 0\.3s"):
        await api.post("stall", {}, max_reply_bytes=BOUND)
    assert pool.busy == (0,)
    await api.aclose()


async def test_the_transport_returns_before_the_body_and_frees_the_pool_once(
    local: LocalServer,
) -> None:
    """The response comes back with its headers, the body unread (the server's 50 MB not
    sent); a body read to its end frees its pool, and closing it after does not free it
    twice."""
    pool = ShardedTransport(8)
    async with asyncio.timeout(5):
        endless = await pool.handle_async_request(
            httpx.Request("POST", f"{local.base_url}/endless", content=b""))
    assert endless.status_code == 200 and pool.busy == (1,)
    await endless.aclose()
    assert pool.busy == (0,)
    echo = await pool.handle_async_request(
        httpx.Request("POST", f"{local.base_url}/echo", json={"id": 7}))
    assert isinstance(echo.stream, httpx.AsyncByteStream)
    assert pool.busy == (1,)
    body = b"".join([chunk async for chunk in echo.stream])
    assert json.loads(body) == {"id": 7} and pool.busy == (0,)
    await echo.aclose()
    assert pool.busy == (0,)
    await pool.aclose()


async def test_each_request_goes_to_the_least_busy_pool(local: LocalServer) -> None:
    """Three pools: three open replies take one each; the pool one of them frees takes the
    next request."""
    pool = ShardedTransport(48)
    assert pool.shards == 3

    async def open_one() -> httpx.Response:
        return await pool.handle_async_request(
            httpx.Request("POST", f"{local.base_url}/stall", content=b""))

    held = [await open_one() for _ in range(3)]
    assert pool.busy == (1, 1, 1)
    await held[1].aclose()
    assert pool.busy == (1, 0, 1)
    held[1] = await open_one()
    assert pool.busy == (1, 1, 1)
    held += [await open_one() for _ in range(3)]
    assert pool.busy == (2, 2, 2)
    for response in held:
        await response.aclose()
    assert pool.busy == (0, 0, 0)
    await pool.aclose()
