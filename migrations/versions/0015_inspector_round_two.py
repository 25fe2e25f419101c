"""The inspector, round two: dead letters with their words, every agent's fallbacks.

- `dead_lettered_sources` gains `message` (the customer's text, or the start of a value that is
not a JSON object), `input_id`, `record_key` and `detail` (the parser's or the failure's
content-free sentence), each bounded and escaped by the consumer (`consumer/refused_words.py`).
  All are nullable: rows written before this revision have none of them.
- `ix_turns_fallback` is made again with the predicate `store/incidents.py` has now: a turn
  the host answered without the model (its own `fallback` line) is a fallback for every agent,
  not only for agents whose lifecycle settings bill it. The predicate is written out here so
  this revision does not change if that module does. Like 0014's, it reads the turn log once;
  on a large live table create it beforehand with CREATE INDEX CONCURRENTLY under another name
  and rename it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("message", "input_id", "record_key", "detail")

FALLBACK_BEFORE = """outcomes @> '[{"code": "billed", "detail": "not billed (fallback)"}]'"""
FALLBACK = (
    """(outcomes @> '[{"code": "billed", "detail": "not billed (fallback)"}]' """
    """OR outcomes @> '[{"code": "fallback"}]')"""
)


def _fallback_index(predicate: str) -> None:
    op.execute("DROP INDEX IF EXISTS ix_turns_fallback")
    op.execute(
        f"CREATE INDEX ix_turns_fallback ON turns (session_id, created_at) WHERE {predicate}"
    )


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("dead_lettered_sources", sa.Column(name, sa.Text, nullable=True))
    _fallback_index(FALLBACK)


def downgrade() -> None:
    _fallback_index(FALLBACK_BEFORE)
    for name in reversed(COLUMNS):
        op.drop_column("dead_lettered_sources", name)
