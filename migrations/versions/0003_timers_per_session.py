"""Timers are identified by (session id, key), and every waiting run has its timer.

Before this revision the `timers` table's primary key was `key` alone. Keys the engine minted
then repeated across conversations (`r1:greet:1` in every conversation of a flow), so a second
conversation's upsert took over the first one's row and that timer never fired. This revision
makes the pair the primary key and then restores every timer a waiting run still expects:
each stored session's runs with a `waiting` key and time get a row under their own session
(existing rows are kept as they are). Timers stored under old keys fire for the session that
owns them; a restored timer whose wake already happened only earns a `stale-wake` answer.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from migrations import online

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Code from before this revision upserts timers on `key` alone, which the new key refuses.
oldest_compatible_revision = "0003"

# A waiting run's timer, for every stored session: the wake key and time the run was parked
# with; `at` is the ISO 8601 time the engine wrote into the session.
_RESTORE_WAITING = """
INSERT INTO timers (session_id, key, at)
SELECT s.id, run -> 'waiting' ->> 'key', (run -> 'waiting' ->> 'at')::timestamptz
FROM sessions AS s
CROSS JOIN LATERAL jsonb_array_elements(
    CASE WHEN jsonb_typeof(s.state -> 'runs') = 'array' THEN s.state -> 'runs' ELSE '[]'::jsonb END
) AS run
WHERE run -> 'waiting' ->> 'key' IS NOT NULL
  AND run -> 'waiting' ->> 'at' IS NOT NULL
  AND run ->> 'status' = 'waiting'
ON CONFLICT (session_id, key) DO NOTHING
"""


def upgrade() -> None:
    # The new key's index is built first without blocking writes; the swap itself is a catalog
    # change under a short lock_timeout (USING INDEX renames the index to timers_pkey).
    online.create_index("timers_session_key", "timers", "(session_id, key)", unique=True)
    def swap() -> None:
        online.lint_ignore(
            "ban-drop-constraint", "the key is replaced in this statement by one built before"
        )
        op.execute(
            "ALTER TABLE timers DROP CONSTRAINT IF EXISTS timers_pkey,"
            " ADD CONSTRAINT timers_pkey PRIMARY KEY USING INDEX timers_session_key"
        )

    online.with_lock_retries(swap, what="timers primary key")
    op.execute(_RESTORE_WAITING)


def downgrade() -> None:
    # The old key-only primary key cannot hold two sessions' equal keys: keep one row per key
    # (the earliest due), as the old schema would have.
    op.execute(
        "DELETE FROM timers a USING timers b"
        " WHERE a.key = b.key AND (a.at, a.session_id) > (b.at, b.session_id)"
    )
    op.drop_constraint("timers_pkey", "timers", type_="primary")
    op.create_primary_key("timers_pkey", "timers", ["key"])
