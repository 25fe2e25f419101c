"""``turnflow erase``: remove one customer's conversation everywhere it is kept, and exit.

``--session ID`` erases that conversation; ``--customer KEY`` erases every conversation a
channel keeps under the customer's key (the id itself and ``KEY:<anything>``; store/erasure.py
says exactly which). One transaction: the session, its turns and model recordings, the sources
of its burst turns, its outbox rows (sent or not), its timers, its dead-lettered inputs and the
dead letters kept whole for it, and with them the search index's entries. The credit ledger
keeps its amounts under a pseudonym. It prints what it removed per table.

Exit codes: 0 erased (or erased before), 2 a value no stored id can be (with the reason),
3 nothing is stored under it, 1 PostgreSQL unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import datetime
from typing import TYPE_CHECKING

from consumer.cli.database_failures import describe
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.settings import Settings

if TYPE_CHECKING:
    from store.erasure import Erasure

__all__ = ["EXIT_NOT_FOUND", "add_arguments", "run"]

EXIT_NOT_FOUND = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    chosen = parser.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--session", metavar="ID", help="erase this conversation")
    chosen.add_argument("--customer", metavar="KEY",
                        help="erase every conversation of this customer key (the session id a "
                        "channel uses for them, e.g. a phone number, and KEY:<anything>)")


def _shown(value: str) -> str:
    """An id as one printable line (quoted, non-ASCII and control characters escaped)."""
    return json.dumps(value)[:200]


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import DBAPIError

    from store import Store
    from store.erasure import TABLES, refusal

    value = args.session if args.session is not None else args.customer
    what = "session" if args.session is not None else "customer"
    if (reason := refusal(value)) is not None:
        return fail(f"refusing to erase {what} {_shown(value)}: {reason}", EXIT_CONFIG)
    settings = Settings()
    if not settings.database_url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    url = settings.database_url

    async def erase() -> tuple[Erasure, dict[str, datetime]]:
        store = await Store.connect(url, pool_size=1, pooler=settings.database_pooler)
        try:
            done = await store.erase(session_id=args.session, customer=args.customer)
            before = {} if done.anything else await store.erased_among([value])
            return done, before
        finally:
            await store.close()

    try:
        done, before = asyncio.run(erase())
    except (DBAPIError, OSError) as exc:
        return fail(describe(exc).line, EXIT_UNREACHABLE)
    if not done.anything:
        if value in before:
            print(f"turnflow: {what} {_shown(value)} was already erased at "
                  f"{before[value].isoformat()}")
            return 0
        return fail(f"nothing is stored for {what} {_shown(value)}", EXIT_NOT_FOUND)
    ids = done.erased_ids
    named = _shown(ids[0]) if len(ids) == 1 else f"{len(ids)} conversations"
    print(f"turnflow: erased {what} {_shown(value)} ({named}) in one transaction")
    for table in TABLES:
        print(f"  {table}: {done.removed[table]} rows deleted")
    print(f"  credit_ledger: {done.ledger_anonymised} rows kept, "
          "their session id and charge key replaced by a pseudonym")
    return 0
