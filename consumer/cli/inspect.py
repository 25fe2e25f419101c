"""``turnflow inspect``: a conversation turn by turn, or the list of conversations.

``turnflow inspect SESSION`` prints the conversation oldest turn first: each turn's input, what
the model understood, what the code decided (outcome lines with flow and step), what was sent
and whether it is published, the timers, the credits; then what is still pending. Without a
session it lists recent conversations, narrowed by ``--outcome`` (handoff, fallback, error,
gated, dead-lettered), ``--flow``, ``--agent`` and ``--since``/``--until``. ``--json`` prints
the same view model for scripts. Reads ``INSPECT_DATABASE_URL`` (else ``DATABASE_URL``) in
read-only transactions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from consumer.cli.arguments import whole_number
from consumer.cli.database_failures import describe
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.inspect.options import database_pooler, database_url, parse_time, trace_url
from consumer.inspect.reading import MAX_PAGE, OUTCOME_FILTERS, Cursor, ListFilter, Reader

__all__ = ["add_arguments", "run"]

EXIT_NOT_FOUND = 3


def _time(value: str) -> Any:
    try:
        return parse_time(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cursor(value: str) -> Cursor:
    try:
        return Cursor.decode(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", nargs="?", help="a session id; without it, list conversations")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument("--turns", type=whole_number(1), default=50,
                        help=f"how many turns to show, the latest unless --since or --from "
                        f"(default 50, at most {MAX_PAGE})")
    parser.add_argument("--from", dest="from_version", type=whole_number(1), default=None,
                        help="show turns from this turn number on")
    parser.add_argument("--since", type=_time, default=None,
                        help="from this time on: ISO 8601 or an age (30m, 2h, 7d)")
    parser.add_argument("--until", type=_time, default=None, help="the list: before this time")
    parser.add_argument("--outcome", choices=OUTCOME_FILTERS, default=None,
                        help="the list: conversations with a turn of this outcome")
    parser.add_argument("--flow", default=None, help="the list: conversations that ran this flow")
    parser.add_argument("--agent", default=None,
                        help="the list: conversations this agent answered")
    parser.add_argument("--limit", type=whole_number(1), default=20,
                        help=f"the list: conversations per page (default 20, at most {MAX_PAGE})")
    parser.add_argument("--after", type=_cursor, default=None,
                        help="the list: the page after this cursor (printed under a full page)")
    parser.add_argument("--search", default=None, metavar="TEXT",
                        help="find turns, conversations' data and dead letters holding TEXT "
                        "(customer or agent words, a field value, an input id, a key, an offset)")
    parser.add_argument("--dead-letters", action="store_true",
                        help="list the dead-lettered records, most recent first, with what "
                        "each said and why it was refused")
    parser.add_argument("--before", type=whole_number(1), default=None,
                        help="--dead-letters: the page before this row id (printed under a page)")
    parser.add_argument("--colour", "--color", choices=("auto", "always", "never"),
                        default="auto", help="colour the output (auto: only on a terminal)")


def _colour(choice: str) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import DBAPIError

    from consumer.inspect import terminal, view
    from consumer.inspect.search_view import search_hits

    url = database_url()
    if url is None:
        return fail("INSPECT_DATABASE_URL or DATABASE_URL must be set", EXIT_CONFIG)
    if args.turns > MAX_PAGE or args.limit > MAX_PAGE:
        return fail(f"--turns and --limit are at most {MAX_PAGE}", EXIT_CONFIG)
    colour = _colour(args.colour) and not args.json
    try:
        traces = trace_url()
        pooler = database_pooler()
        where = ListFilter(outcome=args.outcome, flow=args.flow, agent=args.agent,
                           since=args.since, until=args.until)
    except ValueError as exc:
        return fail(str(exc), EXIT_CONFIG)

    async def read() -> tuple[str, int]:
        reader = Reader(url, pool_size=1, pooler=pooler)
        try:
            if args.session is not None:
                rows = await reader.conversation(
                    args.session, turns=args.turns, from_version=args.from_version,
                    since=args.since,
                )
                if rows is None:
                    erased = await reader.erased_at(args.session)
                    if erased is not None:
                        return (f"turnflow: conversation {args.session!r} was erased at "
                                f"{erased.isoformat()}\n", EXIT_NOT_FOUND)
                    return f"turnflow: no conversation {args.session!r}\n", EXIT_NOT_FOUND
                model = view.conversation_view(rows, trace_url=traces)
                if args.json:
                    return json.dumps(view.to_jsonable(model), ensure_ascii=False) + "\n", 0
                return terminal.conversation_text(model, colour=colour), 0
            if args.search is not None:
                try:
                    results = await reader.search(args.search, limit=args.limit)
                except ValueError as exc:
                    return f"turnflow: {exc}\n", EXIT_CONFIG
                hits = search_hits(results)
                if args.json:
                    document = {"query": results.query, "hits": view.to_jsonable(hits)}
                    return json.dumps(document, ensure_ascii=False) + "\n", 0
                return terminal.search_text(hits, colour=colour), 0
            if args.dead_letters:
                letters, before = await reader.dead_letters(limit=args.limit,
                                                            before=args.before)
                shown = [view.dead_letter(d) for d in letters]
                if args.json:
                    document = {"dead_letters": view.to_jsonable(shown), "before": before}
                    return json.dumps(document, ensure_ascii=False) + "\n", 0
                return terminal.dead_letters_text(shown, colour=colour, next_before=before), 0
            found, following = await reader.conversations(where, limit=args.limit,
                                                          after=args.after)
            items = [view.list_item(row) for row in found]
            cursor = following.encode() if following else None
            if args.json:
                document = {"conversations": view.to_jsonable(items), "next": cursor}
                return json.dumps(document, ensure_ascii=False) + "\n", 0
            return terminal.list_text(items, colour=colour, next_cursor=cursor), 0
        finally:
            await reader.close()

    try:
        text, code = asyncio.run(read())
    except (DBAPIError, OSError) as exc:
        return fail(describe(exc).line,
                    EXIT_UNREACHABLE)
    (sys.stderr if code else sys.stdout).write(text)
    return code
