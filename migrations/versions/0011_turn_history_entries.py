"""Turns: the history entries each turn gives, written by its save.

A load sends the model the conversation's last history entries, and it used to build each one
from its turn's input and messages (a JSON object per entry, the turn's time rendered as text)
on every load: a conversation 25 turns in rebuilt the same 50 entries on each of its turns. The
save now writes the entries its turn gives into ``turns.history`` once, and a load reads them as
they are. Rows saved before this migration keep a NULL there; a load builds their entries with
the same expression as before, so nothing needs rewriting (adding a nullable column without a
default does not rewrite the table either).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from migrations import online

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.with_lock_retries(
        lambda: op.add_column("turns", sa.Column("history", JSONB), if_not_exists=True),
        what="turns.history",
    )


def downgrade() -> None:
    op.drop_column("turns", "history")
