"""Burst turns: the other source records and input ids a turn consumed.

A burst (several messages of one conversation answered as one turn) keeps its last record in
the turn's own ``source_*``/``input_id`` columns; the earlier ones go to ``turn_sources``, one
row each, unique per source record and per conversation input id like the turn's own, so a
replay or a re-produced copy of any of them is recognised.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The foreign key locks `turns` (SHARE ROW EXCLUSIVE) while it is added: under the short
    # lock_timeout with retries. The new table and its indexes are empty, so this is instant.
    def create() -> None:
        op.create_table(
            "turn_sources",
            sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
            sa.Column(
                "turn_id",
                sa.BigInteger,
                sa.ForeignKey("turns.id", ondelete="CASCADE", name="fk_turn_sources_turn"),
                nullable=False,
            ),
            sa.Column("session_id", sa.Text, nullable=False),
            sa.Column("source_topic", sa.Text),
            sa.Column("source_partition", sa.Integer),
            sa.Column("source_offset", sa.BigInteger),
            sa.Column("input_id", sa.Text),
            if_not_exists=True,
        )
        op.create_index(
            "ix_turn_sources_turn", "turn_sources", ["turn_id"], if_not_exists=True
        )
        op.create_index(
            "uq_turn_sources_source",
            "turn_sources",
            ["source_topic", "source_partition", "source_offset"],
            unique=True,
            postgresql_where=sa.text("source_topic IS NOT NULL"),
            if_not_exists=True,
        )
        op.create_index(
            "uq_turn_sources_input",
            "turn_sources",
            ["session_id", "input_id"],
            unique=True,
            postgresql_where=sa.text("input_id IS NOT NULL"),
            if_not_exists=True,
        )

    online.with_lock_retries(create, what="turn_sources")


def downgrade() -> None:
    op.drop_table("turn_sources")
