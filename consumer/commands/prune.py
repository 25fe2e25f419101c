"""``turnflow prune``: drop model recordings past their retention, once, and exit.

The relay does this by itself every few minutes; this command is for a cron job, for a
deployment that runs no relay, or to drop recordings sooner than the configured retention.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta

from consumer.commands.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.settings import Settings

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than-days", type=float, default=None,
        help="drop recordings older than this many days "
        "(default: $MODEL_RECORDING_RETENTION_DAYS; 0 drops every recording)",
    )


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import DBAPIError

    from store import Store

    settings = Settings()
    if not settings.database_url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    days = args.older_than_days
    if days is None:
        days = settings.model_recording_retention_days
        if days <= 0:
            print("turnflow: MODEL_RECORDING_RETENTION_DAYS is 0 (keep); nothing pruned")
            return 0
    if days < 0:
        return fail("--older-than-days must be >= 0", EXIT_CONFIG)
    url = settings.database_url

    async def prune() -> int:
        store = await Store.connect(url, pool_size=1)
        try:
            return await store.prune_recordings(older_than=timedelta(days=days))
        finally:
            await store.close()

    try:
        dropped = asyncio.run(prune())
    except (DBAPIError, OSError) as exc:
        return fail(f"PostgreSQL is unreachable or refused: {type(exc).__name__}", EXIT_UNREACHABLE)
    print(f"turnflow: dropped the model recordings of {dropped} turns older than {days:g} days")
    return 0
