"""``/metrics``, ``/healthz`` and ``/readyz`` on a small HTTP port.

Three GET routes on ``consumer.webserver.server`` (no web framework). ``/healthz`` answers 200
while the event loop runs; ``/readyz`` answers 200 when the service's ``ready()`` says so
(connected and consuming) and 503 otherwise. Bodies carry metric samples and a word, never
conversation content.

The port sits on ``0.0.0.0`` by default, so it takes the shared server's limits: the whole
request head within a deadline, capped header count and size (``414``/``431``), and a cap on
open connections well inside the descriptor limit, so slow clients neither hold the probe's
answer nor take the descriptors the process's own database and broker connections need.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from consumer.errors import PortInUseError
from consumer.metrics import REGISTRY, exports_for
from consumer.settings import Settings
from consumer.webserver.server import (
    DEFAULT_LIMITS,
    BoundedHttpServer,
    HttpLimits,
    Request,
    Response,
)

__all__ = ["HealthServer", "start_health_server"]


class HealthServer:
    """Serves the three endpoints on ``host:port`` until ``stop()``; port 0 picks a free one."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        ready: Callable[[], bool],
        exports: Any = REGISTRY,
        limits: HttpLimits = DEFAULT_LIMITS,
    ) -> None:
        self._ready = ready
        self._exports = exports  # what /metrics serves: the process's own families
        self.http = BoundedHttpServer(self._handle, host=host, port=port, limits=limits)

    @property
    def port(self) -> int:
        return self.http.port

    async def start(self) -> HealthServer:
        await self.http.start()
        return self

    async def stop(self) -> None:
        await self.http.stop()

    async def _handle(self, request: Request) -> Response:
        status, content_type, body = self.respond(
            f"{request.method} {request.target} {request.version}"
        )
        return Response(status, body, content_type)

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
