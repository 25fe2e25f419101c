"""What a dead-lettered record says about its customer, kept beside its source.

`dead_lettered_sources` gains `message` (the customer's text, or the start of a value that is
not a JSON object), `input_id`, `record_key` and `detail` (the parser's or the failure's
content-free sentence), each bounded and escaped by the consumer (`consumer/refused_words.py`).
All are nullable: rows written before this revision have none of them.

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


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("dead_lettered_sources", sa.Column(name, sa.Text, nullable=True))


def downgrade() -> None:
    for name in reversed(COLUMNS):
        op.drop_column("dead_lettered_sources", name)
