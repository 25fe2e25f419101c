"""``turnflow migrate``: ``alembic upgrade head`` against ``MIGRATE_DATABASE_URL``, else
``DATABASE_URL``.

Migrations need a direct connection: through a pooler in transaction mode their session-long
locks and settings would not hold, so with ``DATABASE_POOLER=transaction`` it refuses to run
without ``MIGRATE_DATABASE_URL`` (exit 2).

Facing a database a newer release migrated (a revision these migrations do not know: a
rollback), it migrates nothing and reads the schema's compatibility record: exit 0 with one
line when the newer release declared this one compatible, exit 2 with one line when not.
A lock not granted within the retries (`migrations/online.py`) is exit 1, to be run again.
"""

from __future__ import annotations

import argparse

from consumer.cli.database_failures import describe
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.settings import Settings

__all__ = ["EXIT_INCOMPATIBLE", "add_arguments", "run"]

# A newer release migrated the database and did not declare this release compatible.
EXIT_INCOMPATIBLE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--revision", default="head", help="target revision (default: head)")


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import DBAPIError

    from store import migrate

    settings = Settings()
    url = settings.migrate_database_url or settings.database_url
    if not url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    if settings.migrate_database_url is None and settings.database_pooler == "transaction":
        return fail(
            "DATABASE_POOLER=transaction: set MIGRATE_DATABASE_URL to a direct connection to "
            "PostgreSQL (migrations cannot run through a transaction-mode pooler)",
            EXIT_CONFIG,
        )
    if (problem := migrate.settings_problem()) is not None:
        return fail(problem, EXIT_CONFIG)
    try:
        verdict = migrate.compatibility(url)
        if verdict is not None:
            if not verdict.runs:
                return fail(verdict.reason, EXIT_INCOMPATIBLE)
            print(f"turnflow: {verdict.reason}")
            return 0
        migrate.upgrade(url, args.revision)
    except migrate.LockNotGranted as exc:
        return fail(str(exc), EXIT_UNREACHABLE)
    except (DBAPIError, OSError) as exc:
        return fail(describe(exc).line, EXIT_UNREACHABLE)
    print(f"turnflow: database migrated to {args.revision}")
    return 0
