"""One bounded HTTP/1.x server for every port the project serves.

The health and metrics port of ``consume``, ``schedule`` and ``relay``, the webhook example and
any page served next to them sit on ``0.0.0.0`` by default, where a slow or hostile client can
reach them. A client that drips one header line every few seconds, or simply opens thousands of
connections, must not hold the port (a liveness probe that times out restarts the pod) nor take
the descriptors the process needs for its own database and broker connections. Every server
built here therefore enforces, whatever the handler does:

- **a deadline on the whole request head** (request line and headers together,
  ``HttpLimits.head_timeout_s``): a client still sending its head then gets ``408`` and is
  closed, however steadily it drips;
- **caps on the head**: a request line longer than ``max_head_bytes`` is ``414``; more than
  ``max_header_count`` header lines, or a head over ``max_head_bytes`` in all, is ``431``;
- **a deadline and a cap on the body** a handler reads with ``Request.body()`` (``408``,
  ``413``), and a deadline on writing the response (a client that does not read is dropped);
- **a cap on open connections**: at most ``max_connections`` per server, and at most
  ``descriptor_share`` of the process's descriptor limit (``RLIMIT_NOFILE``, soft) across all
  servers of the process together. The rest of the descriptors are a reserve for the process's
  own database pool, broker connections and files, so slow clients can never starve a turn.
  At the cap a new connection drops the server's oldest connection still sending its head (an
  idle or slow client, never a request being answered); when every connection is being answered
  the new one is closed at once.

Every connection answers one request and is closed (``Connection: close``): there is no
keep-alive to hold a connection open between requests.

Use::

    async def handle(request: Request) -> Response:
        if request.path == "/hello":
            return Response(200, b"hi\\n")
        return Response(404, b"not found\\n")

    server = await BoundedHttpServer(handle, host="0.0.0.0", port=8080).start()
    ...
    await server.stop()

A handler that needs a body awaits ``await request.body()`` (its ``Content-Length``, bounded by
``max_body_bytes``); raising ``HttpError(status, text)`` answers with that status and text;
any other exception is a ``500`` and is logged without the request's content.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

try:  # POSIX only; elsewhere only the per-server cap applies
    import resource
except ImportError:  # pragma: no cover
    resource = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_LIMITS",
    "BoundedHttpServer",
    "Handler",
    "HttpError",
    "HttpLimits",
    "Request",
    "Response",
    "connection_budget",
    "open_connections",
]

log = logging.getLogger("turnflow.http")

REASONS = {
    200: "OK",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class HttpLimits:
    """What one server lets a client do. The defaults suit a probe or metrics port and a small
    JSON API: a real client sends its head in one packet, well under these."""

    head_timeout_s: float = 10.0
    """Seconds from accepting a connection to the end of its request head."""
    max_head_bytes: int = 16 * 1024
    """Request line and headers together (a longer request line alone is ``414``)."""
    max_header_count: int = 64
    """Header lines in one request head."""
    max_body_bytes: int = 64 * 1024
    """The largest ``Content-Length`` ``Request.body()`` reads."""
    body_timeout_s: float = 10.0
    """Seconds ``Request.body()`` waits for the whole body."""
    write_timeout_s: float = 10.0
    """Seconds to hand the response to a client before dropping it."""
    max_connections: int = 64
    """Open connections of this server at once."""
    descriptor_share: float = 0.25
    """The share of ``RLIMIT_NOFILE`` all servers of the process may hold as connections
    together; the rest is the process's reserve."""

    def __post_init__(self) -> None:
        for name in ("head_timeout_s", "body_timeout_s", "write_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"HttpLimits.{name} must be positive")
        for name in ("max_head_bytes", "max_header_count", "max_connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"HttpLimits.{name} must be at least 1")
        if self.max_body_bytes < 0:
            raise ValueError("HttpLimits.max_body_bytes must not be negative")
        if not 0 < self.descriptor_share <= 1:
            raise ValueError("HttpLimits.descriptor_share must be in (0, 1]")


DEFAULT_LIMITS = HttpLimits()


class HttpError(Exception):
    """Raised by a handler (or ``Request.body()``) to answer ``status`` with ``text``."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


@dataclass(frozen=True)
class Response:
    """One answer; ``Content-Length`` and ``Connection: close`` are added by the server."""

    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class Request:
    """A parsed request head; the body stays unread until ``body()``."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    """``(lower-case name, value)`` in the order sent, duplicates kept."""
    _reader: asyncio.StreamReader = field(repr=False)
    _limits: HttpLimits = field(repr=False)
    body_read: bool = field(default=False, init=False)
    """Whether ``body()`` read the body."""

    @property
    def path(self) -> str:
        """The target without its query string."""
        return self.target.split("?", 1)[0]

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key == wanted), None)

    async def body(self, max_bytes: int | None = None) -> bytes:
        """The body its ``Content-Length`` announces, at most ``max_bytes`` (default: the
        server's ``max_body_bytes``): ``413`` past it, ``400`` for a bad length or a short
        body, ``408`` when it does not arrive within ``body_timeout_s``."""
        cap = self._limits.max_body_bytes if max_bytes is None else max_bytes
        raw = self.header("content-length")
        if raw is None:
            return b""
        if not raw.isdigit() or len(raw) > 18:
            raise HttpError(400, "bad Content-Length")
        length = int(raw)
        if length > cap:
            raise HttpError(413, f"body over {cap} bytes")
        try:
            async with asyncio.timeout(self._limits.body_timeout_s):
                body = await self._reader.readexactly(length)
                self.body_read = True
                return body
        except TimeoutError:
            raise HttpError(408, "body not received in time") from None
        except asyncio.IncompleteReadError:
            raise HttpError(400, "body shorter than its Content-Length") from None


Handler = Callable[[Request], Awaitable[Response]]


# -- the process-wide connection budget --------------------------------------------------------

_open_total = 0


def open_connections() -> int:
    """Connections held by every ``BoundedHttpServer`` of this process."""
    return _open_total


def connection_budget(limits: HttpLimits = DEFAULT_LIMITS) -> int:
    """Connections all servers of this process may hold together: ``descriptor_share`` of the
    soft ``RLIMIT_NOFILE`` (read each time, so a limit lowered at run time counts), at least
    one; unlimited descriptors leave only the per-server cap."""
    if resource is None:
        return limits.max_connections
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(1, int(soft * limits.descriptor_share))


@dataclass
class _Connection:
    writer: asyncio.StreamWriter
    opened: float
    task: asyncio.Task[None] | None = None
    answering: bool = False


class BoundedHttpServer:
    """Serves ``handler`` on ``host:port`` (port 0 picks a free one) within ``limits``."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str,
        port: int,
        limits: HttpLimits = DEFAULT_LIMITS,
        version: str = "HTTP/1.0",
    ) -> None:
        self._handler = handler
        self._host = host
        self._port = port
        self._limits = limits
        self._version = version
        self._server: asyncio.Server | None = None
        self._connections: dict[int, _Connection] = {}  # insertion order: oldest first
        self.refused = 0
        """Connections closed at once because every slot was answering a request."""
        self.dropped = 0
        """Connections dropped to make room, and heads that missed their deadline."""
        self.peak_connections = 0
        """The most connections this server held open at once."""

    @property
    def limits(self) -> HttpLimits:
        return self._limits

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def connections(self) -> int:
        """Connections this server holds open now."""
        return len(self._connections)

    async def start(self) -> BoundedHttpServer:
        # The stream limit sits just past the head cap, so one over-long line fails fast
        # instead of being buffered up to asyncio's 64 KB default.
        self._server = await asyncio.start_server(
            self._accept, self._host, self._port, limit=self._limits.max_head_bytes + 2
        )
        return self

    async def stop(self) -> None:
        """Stop listening and drop every open connection."""
        if self._server is not None:
            self._server.close()
            tasks = []
            for connection in list(self._connections.values()):
                connection.writer.transport.abort()
                if connection.task is not None:
                    connection.task.cancel()
                    tasks.append(connection.task)
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> BoundedHttpServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- connections ---------------------------------------------------------------------------

    def _admit(self) -> bool:
        """Make room for a new connection: drop the oldest one still sending its head when a
        cap is reached; False when every held connection is being answered."""
        over_server = len(self._connections) >= self._limits.max_connections
        over_process = _open_total >= connection_budget(self._limits)
        if not (over_server or over_process):
            return True
        oldest = next((c for c in self._connections.values() if not c.answering), None)
        if oldest is None:
            return False
        self._forget(oldest.writer)
        oldest.writer.transport.abort()
        self.dropped += 1
        return True

    def _forget(self, writer: asyncio.StreamWriter) -> None:
        global _open_total
        if self._connections.pop(id(writer), None) is not None:
            _open_total -= 1

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        global _open_total
        if not self._admit():
            self.refused += 1
            writer.close()
            return
        connection = _Connection(writer, time.monotonic(), asyncio.current_task())
        self._connections[id(writer)] = connection
        _open_total += 1
        self.peak_connections = max(self.peak_connections, len(self._connections))
        try:
            await self._serve(reader, writer, connection)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            # Only ``stop()`` cancels a connection's task, and nothing awaits it: ending
            # quietly keeps asyncio from logging each one as an error.
            pass
        finally:
            self._forget(writer)
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(self._limits.write_timeout_s):
                    await writer.wait_closed()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: _Connection
    ) -> None:
        request: Request | None = None
        try:
            request = await self._read_head(reader)
        except HttpError as exc:
            if exc.status == 408:
                self.dropped += 1
            await self._write(writer, _text(exc.status, exc.text), head_only=False)
            if exc.status in (414, 431):
                await self._discard(reader, writer)
            return
        connection.answering = True
        try:
            response = await self._handler(request)
        except HttpError as exc:
            response = _text(exc.status, exc.text)
        except (ConnectionError, asyncio.IncompleteReadError):
            raise
        except Exception as exc:  # a handler's bug answers 500, never kills the server
            log.error("http handler failed", extra={"error": type(exc).__name__})
            response = _text(500, "internal error")
        await self._write(writer, response, head_only=request.method == "HEAD")
        if not request.body_read and request.header("content-length") not in (None, "0"):
            await self._discard(reader, writer)  # an unread body would reset the answer

    async def _read_head(self, reader: asyncio.StreamReader) -> Request:
        """The request line and headers within the head deadline and caps."""
        limits = self._limits
        try:
            async with asyncio.timeout(limits.head_timeout_s):
                try:
                    line = await reader.readline()
                except ValueError:
                    raise HttpError(414, "request line too long") from None
                if len(line) > limits.max_head_bytes:
                    raise HttpError(414, "request line too long")
                used = len(line)
                headers: list[tuple[str, str]] = []
                while True:
                    try:
                        header = await reader.readline()
                    except ValueError:
                        raise HttpError(431, "request head too large") from None
                    if header in (b"\r\n", b"\n", b""):
                        break
                    used += len(header)
                    if used > limits.max_head_bytes:
                        raise HttpError(431, "request head too large")
                    if len(headers) >= limits.max_header_count:
                        raise HttpError(431, "too many header fields")
                    name, _, value = header.decode("latin-1").partition(":")
                    headers.append((name.strip().lower(), value.strip()))
        except TimeoutError:
            raise HttpError(408, "request head not received in time") from None
        parts = line.decode("latin-1").split()
        if len(parts) < 2:
            raise HttpError(400, "bad request line")
        return Request(
            method=parts[0],
            target=parts[1],
            version=parts[2] if len(parts) > 2 else "HTTP/1.0",
            headers=tuple(headers),
            _reader=reader,
            _limits=limits,
        )

    async def _write(
        self, writer: asyncio.StreamWriter, response: Response, *, head_only: bool
    ) -> None:
        status = response.status
        head = (
            f"{self._version} {status} {REASONS.get(status, 'Status')}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in response.headers)
            + "Connection: close\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + (b"" if head_only else response.body))
        async with asyncio.timeout(self._limits.write_timeout_s):
            await writer.drain()

    async def _discard(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read what is left of a refused head or an unread body for a moment (at most a second
        and a few hundred KB), so closing does not reset the connection before the client has
        read the answer. The answer is ended first (EOF), so a client reading to the end has
        it at once and closes, which ends this too."""
        with contextlib.suppress(TimeoutError, ConnectionError, OSError):
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(1.0):
                left = 4 * self._limits.max_head_bytes + 256 * 1024
                while left > 0 and (chunk := await reader.read(min(left, 65536))):
                    left -= len(chunk)


def _text(status: int, text: str) -> Response:
    return Response(status, (text + "\n").encode("utf-8", "replace"))
