"""The input's own id per conversation in the turn log, unique: exact duplicate detection.

Adds ``turns.input_id`` (a message's ``id``, ``event:{key}``, ``start:{key}``; NULL for wakes and
id-less messages) and the unique index ``uq_turns_input`` on (session_id, input_id). Existing
rows are backfilled from their stored ``input``, escaped as ``store.input_ids`` does (``%`` as
``%25``; the JSON column cannot hold NUL or a lone surrogate, so nothing else needs escaping).
Where a conversation already has several turns with one id (a duplicate answered before this
index existed), only the earliest keeps it, so the index can be built.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BACKFILL = """
WITH ids AS (
    SELECT id, session_id, version, replace(CASE
        WHEN input ? 'message' THEN nullif(input ->> 'id', '')
        WHEN input ? 'event' THEN 'event:' || (input ->> 'key')
        WHEN input ? 'start' THEN 'start:' || (input -> 'start' ->> 'key')
    END, '%', '%25') AS input_id
    FROM turns
), firsts AS (
    SELECT id, input_id,
           row_number() OVER (PARTITION BY session_id, input_id ORDER BY version) AS n
    FROM ids
    WHERE input_id IS NOT NULL
)
UPDATE turns SET input_id = firsts.input_id
FROM firsts
WHERE turns.id = firsts.id AND firsts.n = 1
"""


def upgrade() -> None:
    online.with_lock_retries(
        lambda: op.add_column("turns", sa.Column("input_id", sa.Text), if_not_exists=True),
        what="turns.input_id",
    )
    op.execute(_BACKFILL)
    online.create_index(
        "uq_turns_input", "turns", "(session_id, input_id)", unique=True,
        where="input_id IS NOT NULL",
    )


def downgrade() -> None:
    op.drop_index("uq_turns_input", table_name="turns")
    op.drop_column("turns", "input_id")
