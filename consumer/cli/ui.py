"""``turnflow ui``: the read-only web inspector.

Serves the conversation list, the conversation pages and the agent's flow diagram
(``consumer.inspect.web``) from ``INSPECT_DATABASE_URL`` (else ``DATABASE_URL``), in read-only
transactions. Safe by default: it binds 127.0.0.1; binding any other address needs a token
(``TURNFLOW_UI_TOKEN``, or ``TURNFLOW_UI_TOKEN_FILE`` naming a mounted file) that every request
must then carry. docs/inspecting.md says how to run it and how to give it a read-only role.
``--console`` adds the test console (``consumer.inspect.console``), off by default.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sys
from pathlib import Path
from typing import Any

from consumer.cli.arguments import whole_number
from consumer.cli.running import EXIT_CONFIG, fail, run_service

__all__ = ["MIN_TOKEN_CHARS", "add_arguments", "is_loopback", "run", "ui_token"]

DEFAULT_PORT = 8470
MIN_TOKEN_CHARS = 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; any other needs a token)")
    parser.add_argument("--port", type=whole_number(0), default=DEFAULT_PORT,
                        help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--agent", default=None,
                        help="module:attribute of the agent whose flows to draw (default $AGENT)")
    parser.add_argument("--console", action="store_true",
                        help="add the test console: chat with the agent through the topics "
                        "(needs the agent, KAFKA_BOOTSTRAP_SERVERS and a DATABASE_URL the "
                        "consumer may write to); off by default, the inspector only reads")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ui_token() -> str | None:
    """``TURNFLOW_UI_TOKEN``, else the contents of ``TURNFLOW_UI_TOKEN_FILE``; None if unset.
    A ValueError when the file cannot be read or the token is too short to guess at."""
    token = os.environ.get("TURNFLOW_UI_TOKEN", "").strip()
    path = os.environ.get("TURNFLOW_UI_TOKEN_FILE", "").strip()
    if not token and path:
        try:
            token = Path(path).read_text().strip()
        except OSError as exc:
            raise ValueError(f"TURNFLOW_UI_TOKEN_FILE cannot be read: {exc.strerror}") from None
    if not token:
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"TURNFLOW_UI_TOKEN must be at least {MIN_TOKEN_CHARS} characters")
    return token


def run(args: argparse.Namespace) -> int:
    from consumer.agents import load_agent
    from consumer.errors import AgentImportError
    from consumer.inspect.options import database_pooler, database_url, trace_url
    from consumer.inspect.reading import Reader
    from consumer.inspect.serving import CONSOLE_LIMITS, UI_LIMITS, asgi_handler
    from consumer.inspect.web import build_app
    from consumer.logs import configure_logging
    from consumer.webserver.server import BoundedHttpServer

    url = database_url()
    if url is None:
        return fail("INSPECT_DATABASE_URL or DATABASE_URL must be set", EXIT_CONFIG)
    try:
        token = ui_token()
        traces = trace_url()
        pooler = database_pooler()
    except ValueError as exc:
        return fail(str(exc), EXIT_CONFIG)
    if token is None and not is_loopback(args.host):
        return fail(
            f"refusing to serve conversations on {args.host} without a token: set "
            "TURNFLOW_UI_TOKEN (or TURNFLOW_UI_TOKEN_FILE), or bind 127.0.0.1",
            EXIT_CONFIG,
        )
    agent_path = args.agent or os.environ.get("AGENT") or None
    agent: Any = None
    if agent_path:
        try:
            agent = load_agent(agent_path)
        except AgentImportError as exc:
            return fail(str(exc), EXIT_CONFIG)
    settings: Any = None
    if args.console:
        from consumer.devchat.dev import load_settings, turn_wait_s
        from consumer.errors import DevError

        try:
            settings = load_settings()
        except DevError as exc:
            return fail(str(exc), EXIT_CONFIG)
        if agent is None or not settings.kafka_bootstrap_servers or not settings.database_url:
            return fail("--console needs the agent (--agent or AGENT), KAFKA_BOOTSTRAP_SERVERS "
                        "and DATABASE_URL", EXIT_CONFIG)
    configure_logging(os.environ.get("LOG_LEVEL", "INFO"))
    stopping = asyncio.Event()

    async def serve() -> int:
        import contextlib

        async with contextlib.AsyncExitStack() as stack:
            console = None
            if settings is not None:
                from consumer.inspect.console import open_console

                try:
                    console = await open_console(settings, agent, stack,
                                                 reply_timeout=turn_wait_s(agent))
                except DevError as exc:  # a broker or topic that fails: one line, no trace
                    return fail(f"the test console did not start: {exc}", EXIT_CONFIG)
            reader = Reader(url, pooler=pooler)
            stack.push_async_callback(reader.close)
            server = BoundedHttpServer(
                asgi_handler(build_app(reader, agent=agent, token=token, console=console,
                                    agent_spec=agent_path, trace_url=traces),
                             posts=console is not None),
                host=args.host, port=args.port,
                limits=CONSOLE_LIMITS if console is not None else UI_LIMITS,
            )
            await server.start()
            stack.push_async_callback(server.stop)
            shown = f"[{args.host}]" if ":" in args.host else args.host
            what = "test console at /console" if console is not None else "read-only"
            print(f"turnflow ui: http://{shown}:{server.port}/ ({what}"
                  + (", token required)" if token else ")"), file=sys.stderr, flush=True)
            await stopping.wait()
        return 0

    return run_service(serve, stopping.set)
