"""Serving the inspector's ASGI app through ``consumer.webserver.server``'s bounded server.

The pages come from Starlette (routing, responses, templates); the socket is held by the same
``BoundedHttpServer`` every other port of the project uses, so the inspector gets the same
protection against slow or hostile clients: a deadline on the whole request head, caps on its
size and header count, a write deadline, and a connection cap inside the process's descriptor
reserve. Each request is one connection (no keep-alive). Only GET and HEAD are served: the
inspector reads, it never takes a body; the test console (``turnflow ui --console``) alone
takes a POSTed form.

``asgi_handler`` turns one parsed request into an ASGI call and collects the response, which is
whole before it is written (every page is bounded by its paging).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import unquote

from consumer.webserver.server import Handler as HttpHandler
from consumer.webserver.server import HttpLimits, Request, Response

__all__ = ["CONSOLE_LIMITS", "UI_LIMITS", "asgi_handler"]

UI_LIMITS = HttpLimits(max_body_bytes=0, max_connections=32)
"""The inspector's limits: no request body at all, fewer connections than a probe port."""
CONSOLE_LIMITS = HttpLimits(max_body_bytes=16 * 1024, max_connections=32)
"""With the test console: a form's body (a message of at most 4,000 characters, escaped)."""


def asgi_handler(app: Any, *, posts: bool = False) -> HttpHandler:
    """A ``BoundedHttpServer`` handler calling the ASGI ``app`` once per request. ``posts``
    (the test console's form, ``turnflow ui --console``) lets POST through with its body, read
    within ``CONSOLE_LIMITS``."""
    methods = ("GET", "HEAD", "POST") if posts else ("GET", "HEAD")

    async def handle(request: Request) -> Response:
        if request.method not in methods:
            return Response(405, b"the inspector is read-only: GET and HEAD only\n",
                            headers=(("allow", ", ".join(methods)),))
        request_body = await request.body() if request.method == "POST" else b""
        target = request.target
        if not target.startswith("/"):
            return Response(400, b"a request target must start with /\n")
        raw_path, _, query = target.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1" if request.version.endswith("1.1") else "1.0",
            "method": request.method,
            "scheme": "http",
            "path": unquote(raw_path),
            "raw_path": raw_path.encode("latin-1", "replace"),
            "query_string": query.encode("latin-1", "replace"),
            "root_path": "",
            "headers": [
                (name.encode("latin-1", "replace"), value.encode("latin-1", "replace"))
                for name, value in request.headers
            ],
            "client": None,
            "server": None,
        }
        sent_request = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_request
            if not sent_request:
                sent_request = True
                return {"type": "http.request", "body": request_body, "more_body": False}
            await asyncio.Event().wait()  # no disconnect to report: the response is collected
            raise AssertionError("unreachable")

        status = 500
        headers: list[tuple[str, str]] = []
        body: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers.extend(
                    (k.decode("latin-1").lower(), v.decode("latin-1"))
                    for k, v in message.get("headers", [])
                )
            elif message["type"] == "http.response.body":
                body.append(bytes(message.get("body", b"")))

        await app(scope, receive, send)
        content_type = next((v for k, v in headers if k == "content-type"), "text/plain")
        kept = tuple(
            (k, v) for k, v in headers
            if k not in ("content-type", "content-length", "connection", "transfer-encoding")
        )
        return Response(status, b"".join(body), content_type=content_type, headers=kept)

    return handle
