"""``ShardedTransport``: an HTTP connection pool that keeps alive as many connections as a
host runs calls at once, without paying for a big pool.

httpx's default pool keeps only 20 connections alive, so with more calls in the air most calls
connect afresh (a TCP, and for an ``https`` server a TLS, handshake) and close their connection
after the answer. Raising ``max_keepalive_connections`` on one pool keeps them, but httpcore
(1.0) walks every connection of the pool, polling each idle socket, for every request queued
and every response closed, and once more per connection to count idle ones: the cost of a
pass grows with the square of the pool, paid under the pool's lock. With 64 calls at once on
one 64-connection pool that made each call slower than connecting afresh on a local network.
Several small pools, each call given to the least busy, keep every connection alive at a
small pool's cost.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable

import httpx

SHARD_CONNECTIONS = 16
"""Connections of one small pool: past a few dozen a pool's bookkeeping costs more than the
connections it saves."""


class ShardedTransport(httpx.AsyncBaseTransport):
    """``connections`` connections at most, all kept alive between calls, spread over pools of
    ``SHARD_CONNECTIONS``; a request goes to the pool with the fewest requests in the air.

    A request stays counted against its pool until its response body is read to the end,
    fails or is closed, whichever comes first (the connection is its pool's until then), or
    until sending it fails. The body is never read here: the caller streams it, and may stop
    early (a reply over its size bound), so a body is never read further than the caller
    asks."""

    def __init__(self, connections: int, *, shard_connections: int = SHARD_CONNECTIONS) -> None:
        if connections < 1 or shard_connections < 1:
            raise ValueError("a transport needs at least one connection per pool")
        shards = math.ceil(connections / shard_connections)
        per = math.ceil(connections / shards)
        limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
        self._pools = [httpx.AsyncHTTPTransport(limits=limits) for _ in range(shards)]
        self._busy = [0] * shards

    @property
    def shards(self) -> int:
        return len(self._pools)

    @property
    def busy(self) -> tuple[int, ...]:
        """Requests in the air on each pool: sent or being sent, their bodies not yet read to
        the end nor closed."""
        return tuple(self._busy)

    def _releaser(self, index: int) -> Callable[[], None]:
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._busy[index] -= 1

        return release

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = min(range(len(self._pools)), key=self._busy.__getitem__)
        self._busy[index] += 1
        release = self._releaser(index)
        try:
            response = await self._pools[index].handle_async_request(request)
        except BaseException:
            release()
            raise
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = _ReleasingStream(response.stream, release)
        else:  # an async pool always streams asynchronously; nothing to wait for otherwise
            release()
        return response

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class _ReleasingStream(httpx.AsyncByteStream):
    """A response body that calls ``release`` once: when read to the end, when reading it
    fails or is cancelled, or when it is closed, whichever comes first."""

    def __init__(self, stream: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._stream = stream
        self._release = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        finally:
            self._release()

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._release()


__all__ = ["SHARD_CONNECTIONS", "ShardedTransport"]
