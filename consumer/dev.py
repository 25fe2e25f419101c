"""``turnflow dev``: the whole service in one process, with a terminal chat.

It starts (or reuses) an embedded PostgreSQL and an embedded broker unless ``DATABASE_URL`` /
``KAFKA_BOOTSTRAP_SERVERS`` point at real ones, migrates, creates the topics, runs the consumer
and the scheduler, and chats with the agent *through the topics*: a typed line is produced to
``inbound.turns`` like any channel adapter would, and replies are read back from
``outbound.messages`` like any delivery worker would. So what the chat shows is what production
would send, after the save.

Per turn the chat also prints the outcome lines and ``llm_calls``; it learns them by wrapping the
agent (``ObservedAgent``) the in-process consumer runs. Turns nobody typed for — a timer firing,
a silence follow-up — are printed as they happen.

Every startup failure a newcomer can meet ends in one line (``DevError``): a port in use, a
missing environment variable, an agent that fails to import or validate, a server that does not
answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "DEFAULT_AGENT",
    "ChatLine",
    "DevError",
    "DevOptions",
    "ObservedAgent",
    "ObservedTurn",
    "format_outcomes",
    "main",
    "parse_chat_line",
    "run_dev",
]

DEFAULT_AGENT = "examples.demo_agent:agent"


class DevError(Exception):
    """A startup failure explained in one line; ``turnflow dev`` prints it and exits 1."""


# --- the agent the consumer runs, observed ------------------------------------------------------


@dataclass(frozen=True)
class ObservedTurn:
    """One turn the in-process consumer ran: what went in and what came out."""

    request: dict[str, Any]
    result: Any


class ObservedAgent:
    """Delegates every attribute to the agent and reports each ``turn()`` to ``on_turn``.

    The consumer holds this object as its agent; nothing else about it changes. Reporting never
    fails a turn.
    """

    def __init__(self, agent: Any, on_turn: Callable[[ObservedTurn], None]) -> None:
        self._agent = agent
        self._on_turn = on_turn

    async def turn(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        result = await self._agent.turn(request, *args, **kwargs)
        with contextlib.suppress(Exception):  # observing must never break a turn
            self._on_turn(ObservedTurn(_as_dict(request), result))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        dumped = dump()
        if isinstance(dumped, dict):
            return dumped
    return {}


def _get(value: Any, name: str, default: Any = None) -> Any:
    if isinstance(value, dict):
        return value.get(name, default)
    return getattr(value, name, default)


def format_outcomes(result: Any) -> str:
    """The per-turn footer: ``llm_calls`` and one short item per outcome line."""
    items = []
    for outcome in _get(result, "outcomes", []) or []:
        where = "/".join(str(p) for p in (_get(outcome, "flow_id"), _get(outcome, "step_id")) if p)
        what = _get(outcome, "code") or _get(outcome, "status") or "?"
        detail = _get(outcome, "detail")
        item = f"{where} {what}" if where else str(what)
        items.append(f"{item} ({detail})" if detail else item)
    for started in _get(result, "started", []) or []:
        items.append(f"started {_get(started, 'flow_id')}")
    for ended in _get(result, "ended", []) or []:
        reason = _get(ended, "reason")
        items.append(f"ended {_get(ended, 'flow_id')}" + (f" ({reason})" if reason else ""))
    summary = "; ".join(items) if items else "nothing to report"
    return f"llm_calls={_get(result, 'llm_calls', 0)} | {summary}"


# --- what a chat line means ---------------------------------------------------------------------


@dataclass(frozen=True)
class ChatLine:
    """One parsed chat or script line."""

    kind: str  # "message" | "event" | "wait" | "quit" | "skip"
    text: str = ""
    seconds: float = 0.0
    event: str = ""
    payload: dict[str, Any] = field(default_factory=dict)


HELP = (
    "Type a message. /event NAME [JSON] sends an event, /wait SECONDS waits "
    "(timers keep firing), /quit leaves."
)


def parse_chat_line(line: str) -> ChatLine:
    """Read one line: a message, or a ``/command``. Raises ``ValueError`` on a bad command."""
    text = line.strip()
    if not text or text.startswith("#"):
        return ChatLine("skip")
    if not text.startswith("/"):
        return ChatLine("message", text=text)
    command, _, rest = text.partition(" ")
    rest = rest.strip()
    if command in ("/quit", "/exit"):
        return ChatLine("quit")
    if command == "/wait":
        try:
            seconds = float(rest)
        except ValueError:
            raise ValueError(f"/wait needs a number of seconds, got {rest!r}") from None
        if seconds < 0:
            raise ValueError("/wait needs a non-negative number of seconds")
        return ChatLine("wait", seconds=seconds)
    if command == "/event":
        name, _, raw = rest.partition(" ")
        if not name:
            raise ValueError("/event needs a name, e.g. /event paid {\"amount\": 10}")
        payload: Any = {}
        if raw.strip():
            try:
                payload = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"/event payload is not JSON: {exc.msg}") from None
            if not isinstance(payload, dict):
                raise ValueError("/event payload must be a JSON object")
        return ChatLine("event", event=name, payload=payload)
    raise ValueError(f"unknown command {command}; {HELP}")


# --- options and entry point --------------------------------------------------------------------


@dataclass
class DevOptions:
    """What ``turnflow dev`` was asked for."""

    agent: str | None = None
    script: Path | None = None
    session_id: str | None = None
    data_dir: Path = Path(".turnflow")
    reply_timeout: float = 60.0
    out: TextIO = field(default_factory=lambda: sys.stdout)


def main(options: DevOptions) -> int:
    """Run ``turnflow dev``; a startup failure prints one line to stderr and returns 1."""
    try:
        return asyncio.run(run_dev(options))
    except DevError as exc:
        print(f"turnflow dev: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


async def run_dev(options: DevOptions) -> int:
    """Start everything, chat, stop everything; the exit status (0 when every turn answered)."""
    raise NotImplementedError


async def _lines(options: DevOptions) -> AsyncIterator[str]:
    """Script lines, or terminal lines read in a thread so the event loop keeps running."""
    if options.script is not None:
        for line in _read_script(options.script):
            yield line
        return
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, _prompt)
        if line is None:
            return
        yield line


def _read_script(path: Path) -> Iterable[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DevError(f"cannot read script {path}: {exc.strerror or exc}") from None


def _prompt() -> str | None:
    try:
        return input("you> ")
    except EOFError:
        return None


def _new_session_id() -> str:
    return f"dev-{uuid.uuid4().hex[:8]}"


_ = os  # used by the startup code below
