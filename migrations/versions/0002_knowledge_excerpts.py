"""The agent's knowledge for full-text search: knowledge_excerpts with a GIN tsvector index.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.set_lock_timeout()
    op.create_table(
        "knowledge_excerpts",
        sa.Column("agent", sa.Text, nullable=False),
        sa.Column("document_id", sa.Text, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("url", sa.Text),
        sa.Column("text", sa.Text, nullable=False),
        # Accent-folded title and text, written by the application (store/knowledge.py).
        sa.Column("search", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("agent", "document_id", "position"),
        sa.CheckConstraint("type IN ('faq', 'kb')", name="ck_knowledge_excerpts_type"),
    )
    online.lint_ignore("adding-field-with-default", "knowledge_excerpts is new and empty here")
    op.execute(
        "ALTER TABLE knowledge_excerpts ADD COLUMN tsv tsvector "
        "GENERATED ALWAYS AS (to_tsvector('simple', search)) STORED"
    )
    op.create_index(
        "ix_knowledge_excerpts_tsv", "knowledge_excerpts", ["tsv"], postgresql_using="gin"
    )


def downgrade() -> None:
    op.drop_table("knowledge_excerpts")
