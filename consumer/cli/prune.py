"""``turnflow prune``: drop what is past its retention, once, and exit.

Four things are kept for a while and then dropped: model recordings (the model's side of each
turn, for replays; `MODEL_RECORDING_RETENTION_DAYS`), outbox rows already published
(`OUTBOX_RETENTION_DAYS`), dead letters: records kept in full in the `dead_letters` table
and the sources of records sent to the DLQ (`DEAD_LETTER_RETENTION_DAYS`), and the turn log's
partitions, months or days (`TURN_RETENTION_DAYS`, off by default; `TURN_PARTITION`), each
dropped whole. It also makes the turn log's coming partitions. The relay does all of it by
itself every few minutes; this command is for a cron job, for a deployment that runs no relay,
or to drop them sooner than configured.
"""

from __future__ import annotations

import argparse
import asyncio
import math
from datetime import timedelta
from typing import TYPE_CHECKING

from consumer.cli.database_failures import describe
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.settings import MAX_RETENTION_DAYS, Settings

if TYPE_CHECKING:
    from store.partitions import Dropped

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than-days", type=_days, default=None,
        help="drop recordings older than this many days "
        "(default: $MODEL_RECORDING_RETENTION_DAYS; 0 drops every recording)",
    )
    parser.add_argument(
        "--outbox-older-than-days", type=_days, default=None,
        help="delete outbox rows published longer ago than this many days "
        "(default: $OUTBOX_RETENTION_DAYS; 0 deletes every published row)",
    )
    parser.add_argument(
        "--dead-letters-older-than-days", type=_days, default=None,
        help="delete dead letters (kept records and dead-lettered sources) stored longer ago "
        "than this many days (default: $DEAD_LETTER_RETENTION_DAYS; 0 deletes them all)",
    )
    parser.add_argument(
        "--turns-older-than-days", type=_days, default=None,
        help="drop the turn log's partitions wholly older than this many days, and the sessions "
        "nothing is then left of (default: $TURN_RETENTION_DAYS; 0 there keeps the log)",
    )


def _days(value: str) -> float:
    """A number of days as the retention settings take it: ``inf``, ``nan`` or ``1e10`` would
    overflow ``timedelta`` after connecting, so they are refused with the arguments (exit 2)."""
    try:
        days = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number of days") from None
    if not (math.isfinite(days) and 0 <= days <= MAX_RETENTION_DAYS):
        raise argparse.ArgumentTypeError(f"must be a number of days from 0 to {MAX_RETENTION_DAYS}")
    return days


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import DBAPIError

    from store import Store

    settings = Settings()
    if not settings.database_url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    days = args.older_than_days
    if days is None and settings.model_recording_retention_days <= 0:
        print("turnflow: MODEL_RECORDING_RETENTION_DAYS is 0 (keep); nothing pruned")
    elif days is None:
        days = settings.model_recording_retention_days
    outbox_days = args.outbox_older_than_days
    if outbox_days is None and settings.outbox_retention_days <= 0:
        print("turnflow: OUTBOX_RETENTION_DAYS is 0 (keep); no outbox row deleted")
    elif outbox_days is None:
        outbox_days = settings.outbox_retention_days
    letter_days = args.dead_letters_older_than_days
    if letter_days is None and settings.dead_letter_retention_days <= 0:
        print("turnflow: DEAD_LETTER_RETENTION_DAYS is 0 (keep); no dead letter deleted")
    elif letter_days is None:
        letter_days = settings.dead_letter_retention_days
    turn_days = args.turns_older_than_days
    if turn_days is None and settings.turn_retention_days > 0:
        turn_days = settings.turn_retention_days
    url = settings.database_url
    turns: Dropped | None = None

    async def prune() -> tuple[int | None, int | None, tuple[int, int] | None]:
        nonlocal turns
        store = await Store.connect(url, pool_size=1, pooler=settings.database_pooler)
        try:
            dropped = deleted = letters = None
            made = await store.ensure_turn_partitions(unit=settings.turn_partition)
            if made:
                print(f"turnflow: made the turn log's partitions {', '.join(made)}")
            compacted = await store.compact_turn_search()
            if compacted:
                print("turnflow: rebuilt the search indexes of ended partitions "
                      + ", ".join(compacted))
            if turn_days is not None:
                turns = await store.drop_expired_turns(older_than=timedelta(days=turn_days))
            if days is not None:
                dropped = await store.prune_recordings(older_than=timedelta(days=days))
            if outbox_days is not None:
                deleted = await store.delete_published(older_than=timedelta(days=outbox_days))
            if letter_days is not None:
                letters = await store.prune_dead_letters(older_than=timedelta(days=letter_days))
            return dropped, deleted, letters
        finally:
            await store.close()

    try:
        dropped, deleted, letters = asyncio.run(prune())
    except (DBAPIError, OSError) as exc:
        return fail(describe(exc).line, EXIT_UNREACHABLE)
    if dropped is not None:
        print(f"turnflow: dropped the model recordings of {dropped} turns older than {days:g} days")
    if deleted is not None:
        print(f"turnflow: deleted {deleted} outbox rows published more than {outbox_days:g} days"
              " ago")
    if letters is not None:
        print(f"turnflow: deleted {letters[0]} kept dead letters and {letters[1]} dead-lettered"
              f" sources stored more than {letter_days:g} days ago")
    if turns is not None:
        months = ", ".join(turns.partitions) or "no whole partition"
        print(f"turnflow: dropped {months} of the turn log (older than {turn_days:g} days),"
              f" {turns.default_rows} turns from its default partition, {turns.turn_sources}"
              f" burst sources and {turns.sessions} sessions nothing was left of")
    return 0
