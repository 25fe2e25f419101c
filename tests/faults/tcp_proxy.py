"""A loopback TCP proxy whose link can be cut and restored: a broker outage on demand.

What a consumer sees of a broker outage is its connections dropping and new ones being refused
until the broker is back; a proxy makes that happen at a chosen moment and for a chosen time,
with the broker itself untouched. ``TcpProxy`` forwards ``127.0.0.1:port`` to an upstream
address byte for byte; ``cut()`` aborts every open connection and stops listening (so a new
connection is refused, as with a stopped broker), ``restore()`` listens again on the same port.
The upstream keeps running throughout, so nothing stored is lost.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["TcpProxy"]

_CHUNK = 64 * 1024


class TcpProxy:
    """Forwards ``host:port`` to ``upstream_host:upstream_port`` until cut."""

    def __init__(self, upstream_host: str, upstream_port: int, *, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.host = host
        self.port = port
        self.accepted = 0  # connections forwarded so far
        self.severed = 0  # connections aborted by ``cut()``
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def open(self) -> bool:
        return self._server is not None

    async def start(self) -> TcpProxy:
        """Listen (on a free port when none was given); ``port`` then holds the real one."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, self.host, self.port)
            self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def cut(self) -> int:
        """Stop listening and abort every open connection; how many were aborted."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        severed = len(self._links)
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._links):
            task.cancel()
        await asyncio.gather(*self._links, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
        self.severed += severed
        return severed

    async def restore(self) -> None:
        """Listen again on the same port."""
        await self.start()

    async def stop(self) -> None:
        await self.cut()

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _accept(self, client_reader: asyncio.StreamReader,
                      client_writer: asyncio.StreamWriter) -> None:
        if self._server is None:  # accepted in the instant before a cut closed the listener
            client_writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.transport.abort()
            return
        self.accepted += 1
        self._writers |= {client_writer, upstream_writer}
        # The link runs in a task of its own: ``cut()`` cancels it, and asyncio reports a
        # cancelled connection callback as an error, so this callback returns at once.
        link = asyncio.create_task(self._link(
            (client_reader, client_writer), (upstream_reader, upstream_writer)
        ))
        self._links.add(link)
        link.add_done_callback(self._links.discard)

    async def _link(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        try:
            await asyncio.gather(
                self._pump(client[0], upstream[1]), self._pump(upstream[0], client[1])
            )
        finally:
            for writer in (client[1], upstream[1]):
                self._writers.discard(writer)
                writer.transport.abort()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction until EOF or an error, then close the other side for writing."""
        with contextlib.suppress(OSError):
            while data := await reader.read(_CHUNK):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
