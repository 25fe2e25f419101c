"""A real HTTP server on 127.0.0.1 that answers with canned responses, for the provider tests.

Each test queues the responses it wants (status, headers, body, an optional delay) and reads the
requests the server received. The server runs in a thread; a delayed answer waits on an event
that teardown sets, so no thread outlives the test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Canned:
    """One response the server will give."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    delay_s: float = 0.0


@dataclass
class Received:
    """One request the server got."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class CannedServer:
    """Serves queued ``Canned`` responses in order; records every request it gets."""

    def __init__(self) -> None:
        self.responses: list[Canned] = []
        self.received: list[Received] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                with server._lock:
                    server.received.append(Received(
                        "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    canned = server.responses.pop(0) if server.responses else Canned(
                        status=599, body={"error": "no canned response left"})
                if canned.delay_s and server.stopping.wait(canned.delay_s):
                    return
                payload = canned.raw if canned.raw is not None else json.dumps(canned.body).encode()
                try:
                    self.send_response(canned.status)
                    for name, value in canned.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up first (a timeout test); nothing to answer
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def queue(self, *responses: Canned) -> None:
        with self._lock:
            self.responses.extend(responses)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def canned_server() -> Iterator[CannedServer]:
    server = CannedServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
