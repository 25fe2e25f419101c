"""``turnflow migrate``: ``alembic upgrade head`` against ``DATABASE_URL``."""

from __future__ import annotations

import argparse

from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.settings import Settings

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--revision", default="head", help="target revision (default: head)")


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import DBAPIError

    from store import migrate

    settings = Settings()
    if not settings.database_url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    try:
        migrate.upgrade(settings.database_url, args.revision)
    except (DBAPIError, OSError) as exc:
        return fail(f"PostgreSQL is unreachable or refused: {type(exc).__name__}", EXIT_UNREACHABLE)
    print(f"turnflow: database migrated to {args.revision}")
    return 0
