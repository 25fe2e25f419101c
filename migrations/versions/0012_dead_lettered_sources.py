"""Dead-lettered sources: the inbound records the consumer sent to the dead-letter topic.

A record that ran no turn left nothing in the turn log, so a replay after a crash (before its
offset was committed) ran it again: answered late, after the inputs behind it, or dead-lettered
a second time. The consumer now writes each dead-lettered record's source here once the
dead-letter topic has it, and the load's replay check reads this table beside the turn log.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.set_lock_timeout()
    op.create_table(
        "dead_lettered_sources",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("source_topic", sa.Text, nullable=False),
        sa.Column("source_partition", sa.Integer, nullable=False),
        sa.Column("source_offset", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.create_index(
        "uq_dead_lettered_sources_source",
        "dead_lettered_sources",
        ["source_topic", "source_partition", "source_offset"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_table("dead_lettered_sources")
