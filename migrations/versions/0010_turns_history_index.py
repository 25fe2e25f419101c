"""Turns: an index over the turns that give history entries, for a load's history read.

A load reads the conversation's last turns that hold a message or sent one. Through the
(session_id, version) key alone it passed over every turn that did neither (a wake or an event
that sent nothing) on its way back, so a conversation with thousands of silent turns in a row
paid for each of them on every load. This partial index holds only the turns the read wants.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from migrations import online

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.create_index(
        "ix_turns_history", "turns", "(session_id, version)",
        where="input ? 'message' OR jsonb_array_length(messages) > 0",
    )


def downgrade() -> None:
    op.drop_index("ix_turns_history", table_name="turns")
