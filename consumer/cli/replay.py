"""``turnflow replay``: logged conversations run again against an agent, compared turn by turn.

    turnflow replay --agent mypkg.bot:agent [--session ID ...] [--since T] [--until T]
                    [--sample N [--seed S]] [--expect-changes X ...] [--allow-undecidable]
                    [--json FILE] [--junit FILE] [--model recorded|live] [--max-drift PCT]
    turnflow replay --agent mypkg.bot:agent --from DIR        (golden files, no database)
    turnflow replay [--agent registry] [--agent-version recorded|live|N] [--packs P] ...
                    (each turn against the registry agent and version that answered it)
    turnflow replay export --out DIR [--session ID ...] [--since T] [--until T] [--sample N]

Exit status: 0 when nothing changed that was not expected (and, with ``--model live``, no
decision kind drifted past ``--max-drift``), 1 otherwise or when the database is unreachable,
2 for a bad argument or agent. The report goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from consumer.cli.arguments import whole_number
from consumer.cli.database_failures import describe
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.settings import Settings

__all__ = ["add_arguments", "run"]

EXIT_CHANGED = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=["run", "export"], default="run",
                        help="run (default): replay and compare; export: write golden files")
    parser.add_argument("--agent", default=None,
                        help="`module:attribute` of the agent to replay against, or `registry`: "
                        "each turn against the registry agent and version that answered it "
                        "($AGENT for turns that name none). Default, from the turn log: "
                        "`registry`; from --from or with --model live: $AGENT")
    parser.add_argument("--agent-version", type=_agent_version, default=None,
                        metavar="recorded|live|N",
                        help="registry: the version of each turn's agent to replay against: the "
                        "one that answered it (recorded, the default), the live one, or N")
    parser.add_argument("--packs", default=None,
                        help="registry: the packs the agents are built with (default: $PACKS)")
    parser.add_argument("--session", action="append", default=[], metavar="ID",
                        help="replay this session (repeatable; default: every session)")
    parser.add_argument("--since", type=_when, default=None, metavar="TIME",
                        help="only sessions with a turn at or after TIME (ISO 8601; a date is "
                        "midnight UTC)")
    parser.add_argument("--until", type=_when, default=None, metavar="TIME",
                        help="only sessions with a turn before TIME")
    parser.add_argument("--sample", type=whole_number(1), default=None, metavar="N",
                        help="a random sample of N of the chosen sessions")
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample (default 0)")
    parser.add_argument("--expect-changes", nargs="+", action="extend", default=[],
                        metavar="X", help="changes that do not fail the run: an aspect "
                        "(messages, outcomes, started, ended, skipped, schedule, fields, error) "
                        "or a session id")
    parser.add_argument("--allow-undecidable", action="store_true",
                        help="do not fail a conversation whose accepted change left a different "
                        "state, so its later turns could not be compared (they are still "
                        "reported as undecidable)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write the report as JSON to FILE")
    parser.add_argument("--junit", type=Path, default=None, metavar="FILE",
                        help="write the report as JUnit XML to FILE")
    parser.add_argument("--from", dest="from_dir", type=Path, default=None, metavar="DIR",
                        help="replay the golden files of DIR instead of the database (the "
                        "session, time and sample options choose among them)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="export: the directory the golden files go to")
    parser.add_argument("--model", choices=["recorded", "live"], default="recorded",
                        help="recorded (default): the model's recorded replies; live: ask the "
                        "agent's provider again and report decision drift")
    parser.add_argument("--max-drift", type=float, default=None, metavar="PCT",
                        help="live: fail when a decision kind drifts more than PCT percent")
    parser.add_argument("--history-limit", type=whole_number(0), default=None, metavar="N",
                        help="transcript entries given to each turn (default: $HISTORY_LIMIT)")


def _agent_version(value: str) -> str | int:
    if value in ("recorded", "live"):
        return value
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise argparse.ArgumentTypeError("recorded, live or a version number (1 or more)")


def _when(value: str) -> datetime:
    from engine.clock import to_utc

    try:
        return to_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        raise argparse.ArgumentTypeError("not an ISO 8601 date or time") from None


def _unwritable_report(args: argparse.Namespace) -> str | None:
    """Why ``--json`` or ``--junit`` cannot be written, checked before the replay runs: a
    replay can take an hour, and its report was lost to a traceback after it."""
    for option, path in (("--json", args.json), ("--junit", args.junit)):
        if path is None:
            continue
        folder = path.parent
        if not folder.is_dir():
            return f"{option} {path}: the directory {folder} does not exist"
        if path.is_dir():
            return f"{option} {path}: is a directory"
        if not os.access(folder, os.W_OK):
            return f"{option} {path}: the directory {folder} is not writable"
    return None


def run(args: argparse.Namespace) -> int:
    settings = Settings()
    if args.action == "export":
        return _export(args, settings)
    return _replay(args, settings)


def _export(args: argparse.Namespace, settings: Settings) -> int:
    from replay.golden import write_golden
    from replay.source import Selection, choose_sessions, read_conversations
    from store import Store

    if args.out is None:
        return fail("replay export needs --out DIR", EXIT_CONFIG)
    if not settings.database_url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    url = settings.database_url

    async def export() -> int:
        store = await Store.connect(url, pool_size=1, pooler=settings.database_pooler)
        try:
            chosen = await _not_erased(store, await choose_sessions(store,
                                                                   _selection(args, Selection)))
            written = 0
            async for conversation in read_conversations(store, chosen):
                write_golden(conversation, args.out)
                written += 1
            return written
        finally:
            await store.close()

    try:
        written = asyncio.run(export())
    except (OSError, _db_errors()) as exc:
        return fail(describe(exc).line, EXIT_UNREACHABLE)
    print(f"turnflow: wrote {written} conversations to {args.out}")
    return 0


async def _not_erased(store: Any, chosen: list[str]) -> list[str]:
    """``chosen`` without the sessions ``turnflow erase`` removed, each named on stderr as
    erased (a session asked for by id and erased is not an error: there is nothing to replay)."""
    erased = await store.erased_among(chosen)
    for session_id in sorted(erased):
        print(f"turnflow: session {session_id!r} was erased at {erased[session_id].isoformat()};"
              " not replayed", file=sys.stderr)
    return [s for s in chosen if s not in erased]


def _selection(args: argparse.Namespace, kind: Any) -> Any:
    return kind(sessions=tuple(args.session), since=args.since, until=args.until,
                sample=args.sample, seed=args.seed)


def _db_errors() -> type[Exception]:
    from sqlalchemy.exc import DBAPIError

    return DBAPIError


REGISTRY = "registry"


def _from_registry(args: argparse.Namespace) -> bool:
    """Whether each turn's agent comes from the registry: ``--agent registry``, or no --agent
    when replaying the turn log with the recorded replies."""
    if args.agent is not None:
        return bool(args.agent == REGISTRY)
    return args.from_dir is None and args.model == "recorded"


def _load(args: argparse.Namespace, settings: Settings, *, required: bool = True) -> Any:
    from consumer.agents import load_agent
    from consumer.errors import AgentImportError
    from engine import Agent

    path = args.agent if args.agent not in (None, REGISTRY) else settings.agent
    if not path:
        if not required:
            return None
        raise AgentImportError("--agent or AGENT must name the agent (module:attribute)")
    agent = load_agent(path)
    if not isinstance(agent, Agent):
        raise AgentImportError(f"{path!r} is not an engine.Agent; only those can be replayed")
    return agent


def _load_packs(spec: str | None) -> Any:
    from consumer.hosting.packs import load_packs

    return load_packs(spec)


def _replay(args: argparse.Namespace, settings: Settings) -> int:
    from consumer.errors import AgentImportError
    from replay.golden import GoldenFileError, read_directory
    from replay.report import Expectations, junit_xml, report_json, report_text
    from replay.session import Progress, replay_many

    if (unwritable := _unwritable_report(args)) is not None:
        return fail(unwritable, EXIT_CONFIG)
    registry = _from_registry(args)
    if registry and args.model == "live":
        return fail("--model live replays against one agent: pass --agent module:attribute",
                    EXIT_CONFIG)
    if args.agent_version is not None and not registry:
        return fail("--agent-version chooses registry versions: use it with --agent registry",
                    EXIT_CONFIG)
    if registry and not settings.database_url:
        return fail("DATABASE_URL is not set (the registry's agents live there)", EXIT_CONFIG)
    try:
        # From the registry, AGENT (when set) answers only the turns that name no version.
        agent = _load(args, settings, required=not registry)
        packs = _load_packs(args.packs if args.packs is not None else settings.packs) \
            if registry else None
    except AgentImportError as exc:
        return fail(str(exc), EXIT_CONFIG)
    history_limit = args.history_limit if args.history_limit is not None \
        else settings.history_limit
    expectations = Expectations.parse(args.expect_changes,
                                      allow_undecidable=args.allow_undecidable)
    if args.from_dir is None and not settings.database_url:
        return fail("DATABASE_URL is not set (or replay golden files with --from DIR)",
                    EXIT_CONFIG)

    source: Any = agent

    async def conversations_then(use: Any) -> Any:
        nonlocal source
        from replay.source import Selection, choose_sessions, read_conversations, select

        if args.from_dir is not None and not registry:
            conversations = select(read_directory(args.from_dir), _selection(args, Selection))
            return await use(conversations, len(conversations))
        from replay.registry import RegistryAgents
        from store import Store
        from store.hosting import Hosting

        assert settings.database_url is not None
        store = await Store.connect(
            settings.database_url, pool_size=1, pooler=settings.database_pooler
        )
        try:
            if registry:
                assert packs is not None
                source = RegistryAgents(Hosting(store.engine), packs, fallback=agent,
                                        version=args.agent_version or "recorded")
            if args.from_dir is not None:
                conversations = select(read_directory(args.from_dir),
                                       _selection(args, Selection))
                return await use(conversations, len(conversations))
            chosen = await choose_sessions(store, _selection(args, Selection))
            ids = await _not_erased(store, chosen)
            return await use(read_conversations(store, ids), len(ids))
        finally:
            await store.close()

    async def recorded(conversations: Any, total: int) -> Any:
        return await replay_many(source, conversations, expectations=expectations,
                                 history_limit=history_limit, progress=Progress(total))

    async def live(conversations: Any, total: int) -> Any:
        from replay.live import live_drift

        return await live_drift(agent, conversations, history_limit=history_limit,
                                progress=Progress(total))

    try:
        outcome = asyncio.run(conversations_then(live if args.model == "live" else recorded))
    except GoldenFileError as exc:
        return fail(str(exc), EXIT_CONFIG)
    except (OSError, _db_errors()) as exc:
        return fail(describe(exc).line, EXIT_UNREACHABLE)
    if args.model == "live":
        return _live_report(args, outcome)
    print(report_text(outcome))
    if args.json is not None:
        args.json.write_text(report_json(outcome) + "\n", encoding="utf-8")
    if args.junit is not None:
        args.junit.write_text(junit_xml(outcome) + "\n", encoding="utf-8")
    return 0 if outcome.ok else EXIT_CHANGED


def _live_report(args: argparse.Namespace, drift: Any) -> int:
    print(drift.text())
    if args.json is not None:
        args.json.write_text(drift.json() + "\n", encoding="utf-8")
    if args.junit is not None:
        args.junit.write_text(drift.junit(args.max_drift) + "\n", encoding="utf-8")
    if args.max_drift is not None and drift.exceeds(args.max_drift):
        print(f"turnflow: decision drift above {args.max_drift:g}%", file=sys.stderr)
        return EXIT_CHANGED
    return 0
