"""``/metrics``, ``/healthz`` and ``/readyz`` on a small HTTP port.

A deliberately tiny HTTP/1.0 server on asyncio streams (no web framework for three GET routes).
``/healthz`` answers 200 while the event loop runs; ``/readyz`` answers 200 when the service's
``ready()`` says so (connected and consuming) and 503 otherwise. Bodies carry metric samples
and a word, never conversation content.

Whatever a client sends, the port answers or closes without an unhandled error: a request
line or header over the stream's line limit (64 KB) gets 414 or 431, a client that goes
quiet is dropped after a few seconds, and the connection is closed either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from consumer.errors import PortInUseError
from consumer.metrics import REGISTRY, exports_for
from consumer.settings import Settings

__all__ = ["HealthServer", "start_health_server"]

_REASONS = {
    200: "OK",
    404: "Not Found",
    405: "Method Not Allowed",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
_TIMEOUT_S = 5


class HealthServer:
    """Serves the three endpoints on ``host:port`` until ``stop()``; port 0 picks a free one."""

    def __init__(
        self, *, host: str, port: int, ready: Callable[[], bool], exports: Any = REGISTRY
    ) -> None:
        self._host = host
        self._port = port
        self._ready = ready
        self._exports = exports  # what /metrics serves: the process's own families
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> HealthServer:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, content_type, body = await self._read_and_respond(reader)
            head = (
                f"HTTP/1.0 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _read_and_respond(self, reader: asyncio.StreamReader) -> tuple[int, str, bytes]:
        """Read the request line and drain the headers; an over-long line is answered, not
        raised (``readline`` raises ``ValueError`` past the stream's limit)."""
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=_TIMEOUT_S)
        except ValueError:
            return 414, "text/plain", b"request line too long\n"
        while True:
            try:
                line = await asyncio.wait_for(reader.readline(), timeout=_TIMEOUT_S)
            except ValueError:
                return 431, "text/plain", b"header too long\n"
            if line in (b"\r\n", b"\n", b""):
                break
        return self.respond(request_line.decode("latin-1"))

    def respond(self, request_line: str) -> tuple[int, str, bytes]:
        """Status, content type and body for one request line such as ``GET /readyz HTTP/1.1``."""
        parts = request_line.split()
        if len(parts) < 2:
            return 405, "text/plain", b"bad request\n"
        method, path = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self._exports)
        if path == "/healthz":
            return 200, "text/plain", b"ok\n"
        if path == "/readyz":
            if self._ready():
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", b"not ready\n"
        return 404, "text/plain", b"not found\n"


async def start_health_server(
    settings: Settings,
    *,
    ready: Callable[[], bool],
    process: str = "consume",
    exports: Sequence[str] | None = None,
) -> HealthServer | None:
    """The started server on ``METRICS_HOST`` and the process's metrics port (``METRICS_PORT``,
    else its own default), serving the metric families of ``exports`` (default: ``process``'s
    own), or None when the port is 0 (off). A port another process holds is ``PortInUseError``,
    worded as such: nothing is unreachable."""
    port = settings.metrics_port_for(process)
    if not port:
        return None
    view = exports_for(*(exports or (process,)))
    try:
        return await HealthServer(
            host=settings.metrics_host, port=port, ready=ready, exports=view
        ).start()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise PortInUseError(
            f"metrics port {settings.metrics_host}:{port}: address in use by another process; "
            "set METRICS_PORT to a free port (0 turns the port off)"
        ) from None


async def free_metrics_port(settings: Settings, port: int) -> None:
    """``PortInUseError`` when ``port`` on ``METRICS_HOST`` is taken (0: nothing to check); a
    supervisor checks its workers' ports before starting them."""
    if port:
        server = await start_health_server(
            settings.model_copy(update={"metrics_port": port}), ready=lambda: False
        )
        if server is not None:
            await server.stop()
