"""Hosted agents: workspaces, agents and their versions as data, the daily web-search counter,
the credit ledger, and the agent and version on every turn-log row.

One deployment serves many workspaces' agents. An agent's definition is stored as an immutable
version per change, one of which is live; every turn records the agent and version that ran
it. A billed turn's credits go to `credit_ledger` in the same statement as its turn-log row,
keyed by the turn's input, so a retried or replayed turn is never billed twice.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from migrations import online

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _created_at() -> sa.Column[object]:
    return sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    )


def upgrade() -> None:
    online.set_lock_timeout()
    op.create_table(
        "workspaces",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("plan", sa.Text, nullable=False, server_default="default"),
        sa.Column("agents_enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("web_searches_per_day", sa.Integer),
        _created_at(),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.CheckConstraint(
            "web_searches_per_day IS NULL OR web_searches_per_day >= 0",
            name="ck_workspaces_web_searches_per_day",
        ),
        if_not_exists=True,
    )
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.Text, primary_key=True),
        sa.Column("workspace_id", sa.Text, sa.ForeignKey("workspaces.id"), nullable=False),
        sa.Column("live_version", sa.Integer),
        _created_at(),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        if_not_exists=True,
    )
    op.create_index(
        "ix_agents_workspace", "agents", ["workspace_id", "agent_id"], if_not_exists=True
    )
    op.create_table(
        "agent_versions",
        sa.Column("agent_id", sa.Text, sa.ForeignKey("agents.agent_id"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("document", JSONB, nullable=False),
        sa.Column("digest", sa.Text, nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("agent_id", "version", name="pk_agent_versions"),
        if_not_exists=True,
    )
    op.create_table(
        "web_search_usage",
        sa.Column("workspace_id", sa.Text, nullable=False),
        sa.Column("day", sa.Date, nullable=False),
        sa.Column("searches", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("workspace_id", "day", name="pk_web_search_usage"),
        if_not_exists=True,
    )
    op.create_table(
        "credit_ledger",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
        sa.Column("workspace_id", sa.Text),
        sa.Column("agent_id", sa.Text),
        sa.Column("agent_version", sa.Integer),
        sa.Column("session_id", sa.Text, nullable=False),
        sa.Column("turn_id", sa.BigInteger, nullable=False),
        sa.Column("charge_key", sa.Text, nullable=False),
        sa.Column("credits", sa.Integer, nullable=False),
        sa.Column("day", sa.Date, nullable=False),
        _created_at(),
        sa.CheckConstraint("credits > 0", name="ck_credit_ledger_credits"),
        if_not_exists=True,
    )
    op.create_index(
        "uq_credit_ledger_charge", "credit_ledger", ["session_id", "charge_key"], unique=True,
        if_not_exists=True,
    )
    op.create_index(
        "ix_credit_ledger_day", "credit_ledger", ["workspace_id", "day"], if_not_exists=True
    )

    def columns() -> None:
        op.add_column("turns", sa.Column("agent_id", sa.Text), if_not_exists=True)
        op.add_column("turns", sa.Column("agent_version", sa.Integer), if_not_exists=True)

    # Last: the new tables commit with it, and a retry repeats only these catalog changes.
    online.with_lock_retries(columns, what="turns agent columns")


def downgrade() -> None:
    op.drop_column("turns", "agent_version")
    op.drop_column("turns", "agent_id")
    op.drop_table("credit_ledger")
    op.drop_table("web_search_usage")
    op.drop_table("agent_versions")
    op.drop_table("agents")
    op.drop_table("workspaces")
