"""The turn log partitioned by month on `created_at`, the existing log its first partition.

Why: the turn log only grew, and retention had to DELETE (or rewrite) rows one by one. As a
partitioned table, a month of turns past `TURN_RETENTION_DAYS` is one `DROP TABLE`, with no
dead tuples, no vacuum and no WAL for its rows; hot reads stay on the partitions they need.

How, without rewriting the existing log or locking it for long:

1. A CHECK constraint `created_at < T0` is added to `turns` NOT VALID (a brief lock, bounded by
   `lock_timeout`), then validated (a scan that does not block writes). T0 is the first day of
   the next month, at least an hour away, so the turns saved meanwhile (now()) pass it.
2. Indexes are built CONCURRENTLY on `turns` so that every index of the new partitioned table
   finds its twin there: the unique ones of the old table cannot be on a partitioned table
   without the partition key, so the new table has non-unique ones, `ix_turns_session_version`,
   `ix_turns_source`, `ix_turns_input`, and a unique `uq_turns_id` on (id, created_at). The
   other indexes (incidents, history, search, created_at, recorded) are the same on both: the
   old ones are renamed `turns_p_history_*` (a rename does not block writes) so the new table's
   can take their names, and they are attached, not rebuilt.
3. The new table (`turns_partitioned`, with the old one's columns and identity) gets a DEFAULT
   partition (a safety net: a turn whose month has no partition yet) and partitions for T0's
   month and the next.
4. One short transaction (ACCESS EXCLUSIVE on `turns`, bounded by `lock_timeout`; metadata
   only): the foreign key from `turn_sources` is dropped (a partitioned table cannot be
   referenced by `id` alone), the old table loses its identity, is renamed `turns_p_history`,
   the new one becomes `turns` and attaches it as the partition FROM (MINVALUE) TO (T0) — the
   validated CHECK proves its rows fit, so nothing is scanned — and the identity sequence
   continues after the old table's last id.

A lock timeout fails the migration with nothing half-done; it can be run again (each step
checks what is already there). Uniqueness that the old unique indexes gave across the whole
log is kept by the save statement (store/saving.py): a turn is written only if no turn of its
session has its input id and no turn has its source record, under the session's version check.

`sessions.turns_since` (nullable, no default: no rewrite) is the earliest turn time of the
session, kept by each save; the history read is bounded by it, so it reads only the months
from the conversation's first turn on. Sessions begun before have none (no bound).

The old table's unique indexes stay on `turns_p_history` (they still guard its rows) until it
is dropped by retention like any partition.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from alembic import op

from migrations.online import lint_ignore
from sqlalchemy import text

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LOCK_TIMEOUT = "1s"
HISTORY = "turns_p_history"
CHECK = "ck_turns_before_partitions"

# Indexes the partitioned table has that the old one lacks (built on it first, concurrently).
NEW_INDEXES = {
    "uq_turns_id": "UNIQUE INDEX {name} ON {table} (id, created_at)",
    "ix_turns_session_version": "INDEX {name} ON {table} (session_id, version)",
    "ix_turns_source": "INDEX {name} ON {table} (source_topic, source_partition, source_offset)"
    " WHERE source_topic IS NOT NULL",
    "ix_turns_input": "INDEX {name} ON {table} (session_id, input_id) WHERE input_id IS NOT NULL",
}
# The old table's unique indexes, which the partitioned table does not have.
OLD_UNIQUE = ("turns_pkey", "uq_turns_session_version", "uq_turns_source", "uq_turns_input")


def _month(at: datetime, ahead: int = 0) -> datetime:
    """The first instant (UTC) of the month ``ahead`` months after ``at``'s."""
    months = at.year * 12 + at.month - 1 + ahead
    return datetime(months // 12, months % 12 + 1, 1, tzinfo=UTC)


def _partition(parent: str, start: datetime) -> None:
    end = _month(start, 1)
    op.execute(
        f"CREATE TABLE IF NOT EXISTS turns_p{start:%Y_%m} PARTITION OF {parent}"
        f" FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    )


def _scalar(sql: str) -> object:
    return op.get_bind().execute(text(sql)).scalar()


def upgrade() -> None:
    # Offline (`alembic upgrade --sql`, what squawk lints) nothing can be asked of the database:
    # the SQL is written for an unpartitioned log, as of now, with no index to carry over.
    offline = bool(op.get_context().as_sql)
    op.execute("SET LOCAL lock_timeout = '1s'")
    op.execute("ALTER TABLE sessions ADD COLUMN IF NOT EXISTS turns_since timestamptz")
    relkind = None if offline else _scalar(
        "SELECT CAST(relkind AS text) FROM pg_class WHERE oid = to_regclass('turns')"
    )
    if relkind == "p":
        return
    now = datetime.now(UTC) if offline else _scalar("SELECT now()")
    assert isinstance(now, datetime)
    t0 = _month(now, 1)
    if t0 - now < timedelta(hours=1):
        t0 = _month(now, 2)
    existing = None if offline else _scalar(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        f" WHERE conname = '{CHECK}' AND conrelid = 'turns'::regclass"
    )
    if existing is not None:  # a run that stopped half-way: keep its bound
        bound = str(existing).split("'")[1]
        t0 = datetime.fromisoformat(bound + (":00" if bound[-3] in "+-" else "")).astimezone(UTC)
    with op.get_context().autocommit_block():
        op.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        if existing is None:
            lint_ignore("prefer-robust-stmts", "checked above: a rerun finds the constraint and "
                        "keeps its bound; autocommitted so the validation below blocks no write")
            op.execute(
                f"ALTER TABLE turns ADD CONSTRAINT {CHECK}"
                f" CHECK (created_at < '{t0.isoformat()}') NOT VALID"
            )
        lint_ignore("prefer-robust-stmts", "validating twice is harmless; autocommitted, as its "
                    "scan takes only a SHARE UPDATE EXCLUSIVE lock")
        op.execute(f"ALTER TABLE turns VALIDATE CONSTRAINT {CHECK}")
        # The indexes both tables have: the old one's renamed, the new one's take the names.
        shared = {} if offline else {
            str(r[0]): str(r[1]) for r in op.get_bind().execute(text(
                "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index AS i"
                " JOIN pg_class AS c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = 'turns'::regclass AND NOT i.indisunique"
                " AND c.relname NOT LIKE 'turns_p_history_%'"
                f" AND c.relname NOT IN ({', '.join(repr(n) for n in NEW_INDEXES)})"
            ))
        }
        for name in shared:
            op.execute(f"ALTER INDEX {name} RENAME TO {HISTORY}_{name.removeprefix('ix_turns_')}")
        for name, definition in NEW_INDEXES.items():
            valid = None if offline else _scalar(
                f"SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('{name}_old')"
            )
            if valid is False:  # a concurrent build that was interrupted
                op.execute(f"DROP INDEX CONCURRENTLY {name}_old")
            op.execute("CREATE " + definition.format(name=f"{name}_old", table="turns")
                       .replace("INDEX ", "INDEX CONCURRENTLY IF NOT EXISTS ", 1))
        op.execute("RESET lock_timeout")
        if offline or _scalar("SELECT to_regclass('turns_partitioned')") is None:
            lint_ignore("prefer-robust-stmts", "guarded by the to_regclass check above")
            op.execute(
                "CREATE TABLE turns_partitioned (LIKE turns INCLUDING DEFAULTS"
                " INCLUDING IDENTITY INCLUDING STORAGE INCLUDING COMPRESSION)"
                " PARTITION BY RANGE (created_at)"
            )
            lint_ignore("prefer-robust-stmts", "guarded by the to_regclass check above")
            op.execute("CREATE TABLE turns_p_default PARTITION OF turns_partitioned DEFAULT")
            for ahead in (0, 1):
                _partition("turns_partitioned", _month(t0, ahead))
            for name, definition in shared.items():
                op.execute(re.sub(r" ON (public\.)?turns ", " ON turns_partitioned ", definition,
                                  count=1))
            for name, definition in NEW_INDEXES.items():
                lint_ignore("prefer-robust-stmts, require-concurrent-index-creation",
                            "on the new table, still empty and unused (a partitioned index "
                            "cannot be built CONCURRENTLY); guarded by the check above")
                op.execute("CREATE " + definition.format(name=name, table="turns_partitioned"))
    # The swap: metadata only, under one short lock.
    op.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    op.execute("LOCK TABLE turns IN ACCESS EXCLUSIVE MODE")
    lint_ignore("ban-drop-constraint", "a partitioned table cannot be referenced by id alone; "
                "the save writes a turn and its sources in one statement")
    op.execute("ALTER TABLE turn_sources DROP CONSTRAINT IF EXISTS fk_turn_sources_turn")
    lint_ignore("ban-alter-identity", "the ids go on from the new table's identity, set past "
                "the old table's last id below; no client names the sequence")
    op.execute("ALTER TABLE turns ALTER COLUMN id DROP IDENTITY")
    lint_ignore("renaming-table", "the swap: in one transaction, `turns` is the same columns "
                "before and after, so every release's statements keep working")
    op.execute(f"ALTER TABLE turns RENAME TO {HISTORY}")
    lint_ignore("renaming-table", "the swap's other half, in the same transaction")
    op.execute("ALTER TABLE turns_partitioned RENAME TO turns")
    lint_ignore("renaming-object", "the identity's sequence keeps the name it had")
    op.execute("ALTER SEQUENCE turns_partitioned_id_seq RENAME TO turns_id_seq")
    op.execute(
        f"ALTER TABLE turns ATTACH PARTITION {HISTORY}"
        f" FOR VALUES FROM (MINVALUE) TO ('{t0.isoformat()}')"
    )
    lint_ignore("ban-drop-constraint", "the partition bound now says what the CHECK said")
    op.execute(f"ALTER TABLE {HISTORY} DROP CONSTRAINT {CHECK}")
    op.execute(
        f"SELECT setval('turns_id_seq', coalesce((SELECT max(id) FROM {HISTORY}), 0) + 1, false)"
    )


def downgrade() -> None:
    """Back to one table: every other partition's rows are copied into the first one (a
    rewrite of those rows under an exclusive lock: downgrade while the service is stopped)."""
    op.execute("LOCK TABLE turns IN ACCESS EXCLUSIVE MODE")
    op.execute(f"ALTER TABLE turns DETACH PARTITION {HISTORY}")
    op.execute(f"INSERT INTO {HISTORY} SELECT * FROM turns")
    op.execute("DROP TABLE turns")
    op.execute(f"ALTER TABLE {HISTORY} RENAME TO turns")
    for name in NEW_INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}_old")
    for (name,) in op.get_bind().execute(text(
        "SELECT relname FROM pg_class WHERE relkind = 'i' AND relname LIKE 'turns_p_history_%'"
    )).all():
        op.execute(f"ALTER INDEX {name} RENAME TO ix_turns_{name.removeprefix(HISTORY + '_')}")
    op.execute("ALTER TABLE turns ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY")
    op.execute("SELECT setval('turns_id_seq', coalesce((SELECT max(id) FROM turns), 0) + 1, false)")
    op.execute(
        "ALTER TABLE turn_sources ADD CONSTRAINT fk_turn_sources_turn FOREIGN KEY (turn_id)"
        " REFERENCES turns (id) ON DELETE CASCADE"
    )
    op.execute("ALTER TABLE sessions DROP COLUMN turns_since")
