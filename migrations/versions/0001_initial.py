"""Sessions, the turn log, the outbox and timers.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from migrations import online

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_EMPTY = sa.text("'[]'::jsonb")


def upgrade() -> None:
    online.set_lock_timeout()
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("state", JSONB, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "turns",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("input", JSONB, nullable=False),
        sa.Column("messages", JSONB, nullable=False, server_default=_EMPTY),
        sa.Column("schedule", JSONB, nullable=False, server_default=_EMPTY),
        sa.Column("outcomes", JSONB, nullable=False, server_default=_EMPTY),
        sa.Column("started", JSONB, nullable=False, server_default=_EMPTY),
        sa.Column("ended", JSONB, nullable=False, server_default=_EMPTY),
        sa.Column("skipped", JSONB, nullable=False, server_default=_EMPTY),
        sa.Column("llm_calls", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("source_topic", sa.Text),
        sa.Column("source_partition", sa.Integer),
        sa.Column("source_offset", sa.BigInteger),
        sa.UniqueConstraint("session_id", "version", name="uq_turns_session_version"),
    )
    op.create_index(
        "uq_turns_source",
        "turns",
        ["source_topic", "source_partition", "source_offset"],
        unique=True,
        postgresql_where=sa.text("source_topic IS NOT NULL"),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("key", sa.Text),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("published_at", sa.DateTime(timezone=True)),
    )
    op.create_index(
        "ix_outbox_unpublished",
        "outbox",
        ["session_id", "id"],
        postgresql_where=sa.text("published_at IS NULL"),
    )
    op.create_index(
        "ix_outbox_unpublished_id",
        "outbox",
        ["id"],
        postgresql_where=sa.text("published_at IS NULL"),
    )
    op.create_table(
        "timers",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_timers_at", "timers", ["at"])


def downgrade() -> None:
    op.drop_table("timers")
    op.drop_table("outbox")
    op.drop_table("turns")
    op.drop_table("sessions")
