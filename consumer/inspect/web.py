"""``turnflow ui``'s pages: a Starlette app rendering Jinja2 templates over ``reading``/``view``.

Read-only and script-free: every page is HTML and CSS rendered on the server, turns expand with
``<details>``, filters are a GET form, so the list and the timeline work without JavaScript. The
templates autoescape everything; the one piece of markup passed through unescaped is the flow
diagram, which ``diagram.svg`` builds with every label escaped. Pages are sent with a strict
Content-Security-Policy (no script at all, styles from this app only).

Access: with a token (``TURNFLOW_UI_TOKEN``) every page asks for it, as
``Authorization: Bearer <token>`` or the cookie that ``/login?token=...`` sets; without one the
app is meant for a loopback address only (``consumer.cli.ui`` refuses to bind elsewhere).

Logs: one line per request with the route's name, status and time. Never the path or query
(session ids, filters) nor anything from a page.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import shlex
import time
from collections.abc import MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from consumer.inspect import diagram, view
from consumer.inspect.console import (
    MAX_TEXT_CHARS,
    Console,
    is_console_session,
    new_console_session,
)
from consumer.inspect.options import parse_time
from consumer.inspect.reading import MAX_PAGE, OUTCOME_FILTERS, Cursor, ListFilter, Reader
from consumer.inspect.search_view import search_hits

__all__ = ["TOKEN_COOKIE", "build_app"]

log = logging.getLogger("turnflow.ui")

HERE = Path(__file__).parent
TOKEN_COOKIE = "turnflow_ui_token"
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
LIST_PAGE = 50
TURNS_PAGE = 50


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda value: quote(str(value), safe="")
    env.filters["when"] = _when
    env.filters["compact"] = _compact
    return env


def _when(value: Any) -> str:
    """A time as the pages show it: in UTC, and saying so (an ISO 8601 string too)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            return value.strftime("%Y-%m-%d %H:%M:%S")
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)


def _compact(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


class _Guard:
    """Asks for the token on every request when one is set, and adds the security headers."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 0}

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                headers = [
                    (k, v) for k, v in message.get("headers", [])
                    if k.decode().lower() not in SECURITY_HEADERS
                ]
                headers.extend((k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items())
                message = {**message, "headers": headers}
            await send(message)

        request = Request(scope)
        if self.token is not None and not self._allowed(request):
            response: Response = PlainTextResponse(
                "a token is required: open /login?token=... or send Authorization: Bearer\n",
                status_code=401, headers={"www-authenticate": "Bearer"},
            )
            await response(scope, receive, sending)
        else:
            await self.app(scope, receive, sending)
        # The route's fixed name only: never the path or the query (session ids, filters).
        route = getattr(scope.get("route"), "name", None) or "none"
        elapsed_ms = (time.perf_counter() - started) * 1000
        log.info(f"ui {route} {status['code']} {elapsed_ms:.1f} ms")

    def _allowed(self, request: Request) -> bool:
        assert self.token is not None
        if request.url.path in ("/login", "/healthz"):  # the probe's page shows nothing
            return True
        # The scheme is case-insensitive (RFC 9110): "bearer" and "BEARER" are Bearer.
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        ):
            return True
        cookie = request.cookies.get(TOKEN_COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie.encode(), self.token.encode())


def build_app(reader: Reader, *, agent: Any = None, token: str | None = None,
              console: Console | None = None, agent_spec: str | None = None,
              trace_url: str | None = None) -> ASGIApp:
    """The inspector's ASGI app over ``reader``; ``agent`` (optional) for the flow diagram;
    ``trace_url`` (``options.trace_url``) links each traced turn to its page in a trace UI;
    ``console`` (optional, ``turnflow ui --console``) adds the test console at ``/console``,
    the one page that writes anything, and only what a channel adapter would; ``agent_spec``
    (its ``module:attribute``) is written into each turn's ``turnflow replay`` command."""
    env = _templates()
    graph = diagram.flow_graph(agent) if agent is not None else None
    csrf_key = secrets.token_bytes(32)  # per process: a form from an earlier run is refused

    def csrf_token(session_id: str) -> str:
        """The console form's token: bound to its session and this process's key, so a page
        of another site cannot post into a console conversation."""
        return hmac.new(csrf_key, session_id.encode(), hashlib.sha256).hexdigest()

    def page(name: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = env.get_template(name).render(agent=graph.agent if graph else None,
                                             console_on=console is not None, **values)
        return HTMLResponse(html, status_code=status)

    def bad(text: str) -> HTMLResponse:
        return page("error.html", status=400, message=text)

    async def conversations(request: Request) -> Response:
        q = request.query_params
        try:
            where = ListFilter(
                outcome=q.get("outcome") or None,
                flow=q.get("flow") or None,
                agent=q.get("agent") or None,
                since=parse_time(q["since"]) if q.get("since") else None,
                until=parse_time(q["until"]) if q.get("until") else None,
            )
            limit = _number(q.get("limit"), LIST_PAGE)
            after = Cursor.decode(q["after"]) if q.get("after") else None
        except ValueError as exc:
            return bad(str(exc))
        rows, following = await reader.conversations(where, limit=limit, after=after)
        kept = {k: v for k, v in q.items() if k != "after" and v}
        next_url = (
            "/?" + urlencode({**kept, "after": following.encode()}) if following else None
        )
        return page(
            "list.html", items=[view.list_item(r) for r in rows], form=q,
            outcomes=OUTCOME_FILTERS, flows=[f.id for f in graph.flows] if graph else [],
            next_url=next_url, first_url=("/?" + urlencode(kept)) if after else None,
        )

    async def conversation(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        q = request.query_params
        try:
            turns = _number(q.get("turns"), TURNS_PAGE)
            from_version = _turn_number(q["from"]) if q.get("from") else None
            since = parse_time(q["since"]) if q.get("since") else None
        except ValueError as exc:
            return bad(str(exc))
        rows = await reader.conversation(
            session_id, turns=turns, from_version=from_version, since=since
        )
        if rows is None:
            erased = await reader.erased_at(session_id)
            if erased is not None:
                return page("error.html", status=404, message="this conversation was erased at "
                            f"{erased.isoformat(timespec='seconds')}")
            return page("error.html", status=404, message="no such conversation")
        model = view.conversation_view(rows, trace_url=trace_url)
        if q.get("format") == "json":
            # The document ``turnflow inspect SESSION --json`` prints for the same range.
            return JSONResponse(view.to_jsonable(model), headers={
                "content-disposition": 'attachment; filename="conversation.json"'})
        flows_svg = None
        foreign: list[str] = []
        if graph is not None:
            # The path of the turns on this page (a long conversation is read a page at a
            # time, its path too). Built by diagram.svg with every label escaped: the one
            # unescaped piece of the page.
            flows_svg = Markup(diagram.svg(graph, model.path, standalone=False))
            foreign = diagram.foreign_flows(graph, model.path)
        base = "/conversations/" + quote(session_id, safe="")
        earlier = (
            f"{base}?from={max(1, model.first_version - turns)}&turns={turns}"
            if model.has_earlier else None
        )
        later = (
            f"{base}?from={model.last_version + 1}&turns={turns}" if model.has_later else None
        )
        kept = {k: v for k, v in q.items() if k in ("turns", "from", "since") and v}
        replay = shlex.join(["turnflow", "replay", "--agent", agent_spec or "MODULE:ATTRIBUTE",
                             "--session", session_id])
        return page("conversation.html", c=model, flows_svg=flows_svg, earlier=earlier,
                    later=later, latest=f"{base}?turns={turns}" if later else None,
                    json_url=f"{base}?" + urlencode({**kept, "format": "json"}),
                    replay=replay, foreign=foreign)

    async def dead_letters(request: Request) -> Response:
        q = request.query_params
        before_text = q.get("before") or ""
        if before_text and (not before_text.isascii() or not before_text.isdigit()
                            or len(before_text) > 18):
            return bad("before: not a row id")
        letters, following = await reader.dead_letters(
            limit=LIST_PAGE, before=int(before_text) if before_text else None
        )
        return page(
            "dead_letters.html", letters=[view.dead_letter(d) for d in letters],
            next_url=f"/dead-letters?before={following}" if following else None,
        )

    async def search(request: Request) -> Response:
        query = request.query_params.get("q", "")
        try:
            results = await reader.search(query, limit=LIST_PAGE)
        except ValueError as exc:
            return bad(str(exc))
        hits = search_hits(results)
        limited = any(len(found) >= LIST_PAGE for found in
                      (results.turns, results.sessions, results.dead_letters))
        return page("search.html", query=results.query, search_query=results.query, hits=hits,
                    limited=limited, limit=LIST_PAGE)

    async def flows(request: Request) -> Response:
        if graph is None:
            return page("error.html", status=404,
                        message="no agent given: start the inspector with --agent")
        drawing = Markup(diagram.svg(graph, [], standalone=False))
        return page("flows.html", flows_svg=drawing)

    async def login(request: Request) -> Response:
        given = request.query_params.get("token", "")
        response = RedirectResponse("/", status_code=303)
        if token is not None and given and hmac.compare_digest(given.encode(), token.encode()):
            response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="strict")
            return response
        return PlainTextResponse("wrong token\n", status_code=401)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def diagram_css(request: Request) -> Response:
        return Response(diagram.SVG_STYLE, media_type="text/css")

    async def unavailable(request: Request, exc: Exception) -> Response:
        log.warning(f"ui database error: {type(exc).__name__}")
        return page("error.html", status=503,
                    message="The database did not answer; try again in a moment.")

    async def console_page(request: Request) -> Response:
        assert console is not None
        session_id = request.query_params.get("session", "")
        if not is_console_session(session_id):
            return RedirectResponse("/console?session=" + new_console_session(), status_code=303)
        exchanges = console.of(session_id)
        traces: dict[str, Any] = {}
        if exchanges:
            rows = await reader.conversation(session_id, turns=TURNS_PAGE)
            if rows is not None:
                traces = {t.input_id: t for t in view.conversation_view(rows).turns
                          if t.input_id}
        return page("console.html", session_id=session_id, csrf=csrf_token(session_id),
                    exchanges=exchanges, traces=traces, max_chars=MAX_TEXT_CHARS)

    async def console_send(request: Request) -> Response:
        assert console is not None
        form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=8)
        session_id = (form.get("session") or [""])[0]
        given = (form.get("csrf") or [""])[0]
        if not hmac.compare_digest(given.encode(), csrf_token(session_id).encode()):
            return page("error.html", status=403,
                        message="the form's token does not match: reload the console page")
        if not is_console_session(session_id):
            return bad("the console writes under its own session ids only")
        try:
            await console.send(session_id, (form.get("text") or [""])[0])
        except ValueError as exc:
            return bad(str(exc))
        return RedirectResponse(
            "/console?session=" + quote(session_id, safe="") + "#end", status_code=303
        )

    console_routes = [
        Route("/console", console_page, methods=["GET", "HEAD"], name="console"),
        Route("/console", console_send, methods=["POST"], name="console_send"),
    ] if console is not None else []
    app = Starlette(exception_handlers={DBAPIError: unavailable, OSError: unavailable}, routes=[
        *console_routes,
        Route("/", conversations, name="list"),
        Route("/conversations/{session_id:path}", conversation, name="conversation"),
        Route("/dead-letters", dead_letters, name="dead_letters"),
        Route("/search", search, name="search"),
        Route("/flows", flows, name="flows"),
        Route("/login", login, name="login"),
        Route("/healthz", healthz, name="healthz"),
        Route("/static/diagram.css", diagram_css, name="diagram_css"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ])
    return _Guard(app, token)


MAX_TURN_NUMBER = 10**15
"""The largest turn number a page may start from (a bigint holds far more; no conversation
comes near)."""


def _turn_number(value: str) -> int:
    """A turn number to page from (``?from=``): any whole number from 1, however long the
    conversation; a page is the range of turn numbers from it (versions are dense), read
    through the turns' ``(session_id, version)`` key."""
    if not value.isascii() or not value.isdigit() or len(value) > 15:
        raise ValueError("from: not a turn number")
    number = int(value)
    if not 1 <= number <= MAX_TURN_NUMBER:
        raise ValueError("from: turn numbers start at 1")
    return number


def _number(value: str | None, default: int | None) -> int:
    if value is None or value == "":
        assert default is not None
        return default
    if not value.isdigit() or len(value) > 6:
        raise ValueError("not a whole number")
    number = int(value)
    if not 1 <= number <= MAX_PAGE:
        raise ValueError(f"a page is 1 to {MAX_PAGE} rows")
    return number
