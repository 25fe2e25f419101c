"""``turnflow graph``: an agent's flows as a diagram file, SVG or Mermaid.

The same drawing ``turnflow ui`` shows (``consumer.inspect.diagram``): every flow with its
triggers, every step, every move between them. ``--session`` highlights the path one
conversation's last thousand turns took (read from ``INSPECT_DATABASE_URL`` or
``DATABASE_URL``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from consumer.cli.database_failures import describe
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail

EXIT_NOT_FOUND = 3  # as `turnflow inspect SESSION`

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", required=True, help="module:attribute of the agent")
    parser.add_argument("--format", choices=("svg", "mermaid"), default=None,
                        help="svg or mermaid (default: from --output's suffix, else mermaid)")
    parser.add_argument("--output", "-o", type=Path, default=None,
                        help="file to write (default: standard output)")
    parser.add_argument("--session", default=None,
                        help="highlight the path this conversation took")


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import DBAPIError

    from consumer.agents import load_agent
    from consumer.errors import AgentImportError
    from consumer.inspect import diagram

    try:
        agent = load_agent(args.agent)
    except AgentImportError as exc:
        return fail(str(exc), EXIT_CONFIG)
    graph = diagram.flow_graph(agent)
    fmt = args.format or (
        "svg" if args.output is not None and args.output.suffix.lower() == ".svg" else "mermaid"
    )
    path: list[tuple[str, str]] = []
    if args.session is not None:
        from consumer.inspect import view
        from consumer.inspect.options import database_pooler, database_url
        from consumer.inspect.reading import Reader

        url = database_url()
        if url is None:
            return fail("--session needs INSPECT_DATABASE_URL or DATABASE_URL", EXIT_CONFIG)
        try:
            pooler = database_pooler()
        except ValueError as exc:
            return fail(str(exc), EXIT_CONFIG)

        async def visited() -> list[tuple[str, str]] | None:
            reader = Reader(url, pool_size=1, pooler=pooler)
            try:
                if await reader.conversation(args.session, turns=1) is None:
                    return None
                return view.path(await reader.outcome_lines(args.session))
            finally:
                await reader.close()

        try:
            found = asyncio.run(visited())
        except (DBAPIError, OSError) as exc:
            return fail(describe(exc).line,
                        EXIT_UNREACHABLE)
        if found is None:
            return fail(f"no conversation {args.session!r}", EXIT_NOT_FOUND)
        path = found
        foreign = diagram.foreign_flows(graph, path)
        if foreign:
            print(f"turnflow graph: warning: the conversation ran flows this agent does not "
                  f"have ({', '.join(foreign)}): another agent answered it?", file=sys.stderr)
    text = diagram.svg(graph, path) if fmt == "svg" else diagram.mermaid(graph, path)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        args.output.write_text(text)
    except OSError as exc:
        return fail(f"cannot write {args.output}: {exc.strerror}", EXIT_CONFIG)
    print(f"turnflow graph: wrote {args.output} ({fmt})", file=sys.stderr)
    return 0
