"""``turnflow dev``: the whole service in one process, with a terminal chat.

It starts (or reuses) an embedded PostgreSQL and an embedded broker unless ``DATABASE_URL`` /
``KAFKA_BOOTSTRAP_SERVERS`` point at real ones, migrates, creates the topics, runs the consumer
and the scheduler, and chats with the agent *through the topics*: a typed line is produced to
``inbound.turns`` like any channel adapter would, and replies are read back from
``outbound.messages`` like any delivery worker would. So what the chat shows is what production
would send, after the save.

Per turn the chat also prints the outcome lines and ``llm_calls``; it learns them by wrapping the
agent (``ObservedAgent``) the in-process consumer runs. Turns nobody typed for — a timer firing,
a silence follow-up — are printed as they happen. It also reads the DLQ topic from its end, so
an input the consumer dead-letters is reported at once instead of waited for. Several lines
pasted at once, or ``/burst A | B | C``, go out together as a burst, as a customer typing fast
sends them, and the consumer answers them as one turn.

Every startup failure a newcomer can meet ends in one line (``DevError``): a port in use, a
missing environment variable, an agent that fails to import or validate, a server that does not
answer.

Every run starts fresh: the embedded broker keeps its records in memory, so the run gets a new,
empty database to match (a turn log kept from an earlier run would take the new broker's offsets
for replays). The banner says so. With ``DATABASE_URL`` set and the embedded broker, the run's
topics are named for the run instead (the configured name and a run id), since the turn log
knows a record by topic, partition and offset: one database keeps recording after recording.
In a terminal the chat has line editing and history (``readline``; the history is kept in
``.turnflow/chat_history``). Ctrl-C ends it with exit code 0, and so do SIGTERM and SIGHUP,
after stopping what the run started (the embedded PostgreSQL included). Unless ``METRICS_PORT``
is set, the metrics port is a free one the kernel picks, on 127.0.0.1 unless ``METRICS_HOST``
says otherwise.
"""


from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from consumer import tracing
from consumer.agents import load_agent
from consumer.devchat.client import (
    DeadLetterNotice,
    DeadLetterReader,
    ObservedAgent,
    ObservedTurn,
    ReplyReader,
    format_outcomes,
    read_dead_letter,
    reader_consumer,
    start_producer,
)
from consumer.devchat.lines import HELP, ChatLine, parse_chat_line, parse_chat_lines
from consumer.devchat.servers import (
    DevServices,
    bring_up_broker,
    bring_up_database,
    cancel,
    check_port_free,
    create_topics,
    dev_metrics,
    migrate,
    new_run_id,
    run_topics,
)
from consumer.devchat.terminal import (
    TTY_LINE_MAX,
    Chat,
    TerminalLines,
    from_list,
    noting_cuts,
    until_interrupted,
)
from consumer.errors import AgentImportError, DevError
from consumer.inputs import MAX_SESSION_ID_CHARS
from consumer.logs import JsonFormatter
from consumer.settings import Settings
from engine import Agent, FlowConfigurationError
from engine.recording import recorded_agent

# The chat's pieces live in consumer.devchat.client (shared with the inspector's test console),
# consumer.devchat.lines, consumer.devchat.terminal (the terminal's view) and
# consumer.devchat.servers;
# they are named here too, where ``turnflow dev``'s callers know them.
__all__ = [
    "DEFAULT_AGENT",
    "TTY_LINE_MAX",
    "Chat",
    "ChatLine",
    "DeadLetterNotice",
    "DeadLetterReader",
    "DevError",
    "DevOptions",
    "ObservedAgent",
    "ObservedTurn",
    "ReplyReader",
    "TerminalLines",
    "add_arguments",
    "dev_metrics",
    "format_outcomes",
    "main",
    "options_from",
    "parse_chat_line",
    "parse_chat_lines",
    "read_dead_letter",
    "run",
    "run_dev",
    "turn_wait_s",
]

DEFAULT_AGENT = "examples.demo_agent:agent"

# --- options and entry point --------------------------------------------------------------------


@dataclass
class DevOptions:
    """What ``turnflow dev`` was asked for."""

    agent: str | None = None
    script: Path | None = None
    session_id: str | None = None
    data_dir: Path = Path(".turnflow")
    reply_timeout: float | None = None  # None: from the model's timeout (``turn_wait_s``)
    out: TextIO = field(default_factory=lambda: sys.stdout)
    interactive: bool = field(default_factory=lambda: sys.stdin.isatty())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``turnflow dev`` (shared by ``consumer.cli`` and ``python -m``)."""
    parser.add_argument(
        "--agent", metavar="MODULE:ATTR",
        help=f"the agent to chat with (default: AGENT, else {DEFAULT_AGENT})",
    )
    parser.add_argument(
        "--script", metavar="FILE", type=Path,
        help="feed the lines of FILE instead of a terminal, then exit (/wait N waits N seconds)",
    )
    parser.add_argument(
        "--session", metavar="ID", type=_session_id,
        help="session id (default: a new one); every run starts with empty servers, so an id "
        "from an earlier run starts a new conversation under that id (with DATABASE_URL set, "
        "the same id carries on the conversation it names there)",
    )
    parser.add_argument(
        "--data-dir", metavar="DIR", type=Path, default=Path(".turnflow"),
        help="where the embedded PostgreSQL keeps its data and the log goes (default .turnflow)",
    )


def _session_id(value: str) -> str:
    """A session id the consumer's parser takes: it refuses a blank or overlong one, so every
    input of the chat would be dropped and wait out its timeout; refused here instead."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be blank")
    if len(value) > MAX_SESSION_ID_CHARS:
        raise argparse.ArgumentTypeError(f"longer than {MAX_SESSION_ID_CHARS} characters")
    return value


def options_from(args: argparse.Namespace) -> DevOptions:
    return DevOptions(
        agent=args.agent, script=args.script, session_id=args.session, data_dir=args.data_dir
    )


def run(args: argparse.Namespace) -> int:
    """``turnflow dev`` (the entry ``consumer.cli`` calls)."""
    return main(options_from(args))


def main(options: DevOptions) -> int:
    """Run ``turnflow dev``; a startup failure prints one line to stderr and returns 1."""
    try:
        return asyncio.run(_stopped_by_signals(run_dev(options)))
    except DevError as exc:
        print(f"turnflow dev: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C is how a chat is left: not a failure (``make run`` would report "Error 130").
        print("\nturnflow dev: stopped.", file=sys.stderr, flush=True)
        return 0


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end a chat as Ctrl-C does (``kill``, a closed terminal, a process manager):
everything this run started stops in order, its embedded PostgreSQL included."""


async def _stopped_by_signals(running: Coroutine[Any, Any, int]) -> int:
    """Run ``running``; a stop signal cancels it, so its exit stack stops the servers it
    started instead of the process dying with them still running. Exit code 0, as Ctrl-C."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(running)
    received: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        if not received:
            received.append(sig)
            task.cancel()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await task
    except asyncio.CancelledError:
        if not received or not task.cancelled():
            raise
        print(f"\nturnflow dev: stopped ({received[0].name}).", file=sys.stderr, flush=True)
        return 0
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def run_dev(options: DevOptions) -> int:
    """Start everything, chat, stop everything; 0 when every input got its turn and replies."""
    settings = load_settings()
    agent_path = options.agent or settings.agent or DEFAULT_AGENT
    agent = load_dev_agent(agent_path)
    lines = _read_script(options.script) if options.script is not None else None
    settings = dev_metrics(settings)
    metrics_port = settings.metrics_port_for("consume")
    if metrics_port:
        check_port_free(settings.metrics_host, metrics_port, "METRICS_PORT")
    if lines is None and not options.interactive:
        lines = sys.stdin.read().splitlines()  # piped in: the same as --script
    options.data_dir.mkdir(parents=True, exist_ok=True)
    _log_to_file(options.data_dir / "dev.log", settings.log_level)
    out = options.out

    def status(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    status("turnflow dev")
    status(f"  agent     {agent_path} ({getattr(agent, 'name', '?')})")
    status(f"  model     {describe_provider(_provider_of(agent))}")
    if options.reply_timeout is None:
        options.reply_timeout = turn_wait_s(agent)
    own_database, own_broker = settings.database_url, settings.kafka_bootstrap_servers
    traces = _start_tracing()
    if traces:
        status(f"  traces    {traces}")
    async with contextlib.AsyncExitStack() as stack:
        # Last out: the spans of the chat's final turns are flushed once the services stopped.
        stack.callback(tracing.shutdown)
        database_url = await bring_up_database(settings, options.data_dir, stack, status)
        bootstrap = await bring_up_broker(settings, stack, status)
        # Its own consumer group, so a dev run pointed at a shared broker never takes
        # partitions from a real consumer.
        updates: dict[str, Any] = {
            "database_url": database_url,
            "kafka_bootstrap_servers": bootstrap,
            "group_id": f"{settings.group_id}-dev",
        }
        if not own_broker:
            updates["kafka_idempotent_producer"] = False  # the embedded broker has no producer ids
            # It answers an empty fetch only when the wait runs out, not when a record arrives.
            updates["kafka_fetch_max_wait_ms"] = 10
        settings = settings.model_copy(update=updates)
        await migrate(database_url)
        if own_database and not own_broker:
            # The embedded broker numbers offsets from 0 each run, and the turn log knows a
            # record by topic, partition and offset: this run's topics get their own names, so
            # a database that outlives the run takes recording after recording.
            settings = settings.model_copy(update=run_topics(settings, new_run_id()))
            status(f"  topics    {settings.inbound_topic} (named for this run)")
        await create_topics(settings)
        session_id = options.session_id or _new_session_id()
        chat = await _open_chat(settings, session_id, getattr(agent, "name", "agent"), options,
                                stack)
        chat.max_record_bytes = settings.max_record_bytes
        if isinstance(agent, Agent):  # the turn log keeps what `turnflow replay` needs
            agent = recorded_agent(agent)
        services = DevServices(settings, ObservedAgent(agent, chat.observe, chat.failed))
        await services.start()
        stack.push_async_callback(services.stop)
        display = asyncio.create_task(chat.display(), name="dev-display")
        stack.push_async_callback(cancel, display)
        if metrics_port:
            shown = settings.metrics_host if settings.metrics_host not in ("0.0.0.0", "") else (
                "127.0.0.1")
            status(f"  metrics   http://{shown}:{metrics_port}/metrics")
        status(f"  session   {session_id}   (logs: {options.data_dir / 'dev.log'})")
        status(HELP if lines is None else f"Running {options.script or 'standard input'}.")
        if lines is None:
            terminal = TerminalLines(history=options.data_dir / "chat_history")
            chat.prompt = terminal
            with terminal.editing():
                await until_interrupted(chat.run(noting_cuts(aiter(terminal), chat)))
        else:
            await chat.run(from_list(lines))
    return 1 if chat.missing else 0



def _start_tracing() -> str | None:
    """Tracing from the standard ``OTEL_*`` variables, as ``consume``, ``schedule`` and ``relay``
    do: the consumer, scheduler and relay of the chat run in this process, so each turn, wake and
    re-send is a span. Returns where the spans go (for the start-up lines), None when off;
    variables that cannot be used raise ``DevError`` with the one-line reason."""
    if (problem := tracing.start()) is not None:
        raise DevError(problem)
    if not tracing.enabled_by(os.environ):
        return None
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return f"OTLP/HTTP {endpoint}" if endpoint else os.environ.get("OTEL_TRACES_EXPORTER", "on")


def _read_script(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DevError(f"cannot read script {path}: {exc.strerror or exc}") from None


def _new_session_id() -> str:
    return f"dev-{uuid.uuid4().hex[:8]}"


# --- startup, each failure one line -------------------------------------------------------------


def load_settings() -> Settings:
    """The settings from the environment; a bad value names its variable."""
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        variable = str(first["loc"][0]).upper() if first.get("loc") else "?"
        # An unreadable KAFKA_SASL_PASSWORD_FILE is one of these too, named as that variable.
        raise DevError(f"environment variable {variable} is invalid: {first['msg']}") from None


def load_dev_agent(path: str) -> Any:
    """Import the agent, with the working directory importable as uvicorn and pytest do.

    A module that reads an unset environment variable at import (``os.environ["X"]``) is reported
    as that missing variable; a configuration error keeps the engine's message, which names the
    flow and the step.
    """
    try:
        return load_agent(path)  # the working directory is importable (load_agent adds it)
    except AgentImportError as exc:
        cause = exc.__cause__
        # Only a plain KeyError is os.environ[...]: a subclass (an unknown time zone is one) is not.
        if type(cause) is KeyError and cause.args and str(cause.args[0]) not in os.environ:
            raise DevError(
                f"agent {path} needs the environment variable {cause.args[0]}, which is not set"
            ) from None
        if isinstance(cause, FlowConfigurationError):
            raise DevError(f"agent {path} is invalid: {cause}") from None
        raise DevError(f"agent {path}: {exc}") from None


def _provider_of(agent: Any) -> Any:
    config = getattr(agent, "config", None)
    return getattr(config, "provider", None) or getattr(agent, "provider", None)


MIN_TURN_WAIT_S = 60.0
TURN_WAIT_MARGIN_S = 30.0


def turn_wait_s(agent: Any) -> float:
    """How long the chat waits for one input's turn and replies: every model call the turn may
    make at the provider's own timeout (understand, a history summary, speak, and one more per
    tool round when the agent has tools), plus a margin for the broker and the store; never
    under 60 s. A fixed wait would print a slow model's replies against the next input."""
    timeout = getattr(_provider_of(agent), "timeout", None)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        return MIN_TURN_WAIT_S
    config = getattr(agent, "config", None)
    tool_rounds = int(getattr(config, "max_tool_loops", 0) or 0) if getattr(
        config, "tools", None) else 0
    calls = 3 + tool_rounds
    return max(MIN_TURN_WAIT_S, calls * float(timeout) + TURN_WAIT_MARGIN_S)


def describe_provider(provider: Any) -> str:
    """One safe line naming the model provider (providers describe themselves, never the key)."""
    if provider is None:
        return "none configured"
    description = getattr(provider, "description", None)
    return str(description) if description else type(provider).__name__


def _log_to_file(path: Path, level: str) -> None:
    """The service's JSON logs go to a file so the chat stays readable."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())


async def _open_chat(
    settings: Settings, session_id: str, agent_name: str, options: DevOptions,
    stack: contextlib.AsyncExitStack,
) -> Chat:
    client = settings.kafka_client_options()
    producer = await start_producer(settings, client, stack)
    replies = ReplyReader(
        reader_consumer(settings, client),
        settings.messages_topic,
        session_id,
    )
    await replies.start()
    stack.push_async_callback(replies.stop)
    chat = Chat(
        session_id=session_id,
        agent_name=str(agent_name).lower(),
        producer=producer,
        inbound_topic=settings.inbound_topic,
        replies=replies,
        out=options.out,
        reply_timeout=options.reply_timeout or MIN_TURN_WAIT_S,
        echo=options.script is not None or not options.interactive,
    )
    chat.log_path = options.data_dir / "dev.log"
    letters = DeadLetterReader(
        reader_consumer(settings, client),
        settings.dlq_topic,
        chat.dead_lettered,
    )
    await letters.start()
    stack.push_async_callback(letters.stop)
    return chat



if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="turnflow dev", description=__doc__.splitlines()[0])
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))
