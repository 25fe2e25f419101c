"""A canary version per agent: `agents.canary_version` and `agents.canary_percent`.

`turnflow agents activate AGENT V --percent N` sends N% of new conversations (chosen by a hash
of the session id) to version V and the rest to the live version; `--percent 100` promotes V
(it becomes live and the canary is cleared), and activating any version clears the canary (a
roll-back). Both columns are NULL when the agent has no canary.

`agents.migrate_to` and `agents.migrate_map` keep the run map given with `agents activate AGENT
V --migrate MAP`: conversations pinned to an older version whose every run is mapped move to V
at their next turn (the map goes into that turn's request). Activating again without a map
clears it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from migrations import online

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    def columns() -> None:
        op.add_column("agents", sa.Column("canary_version", sa.Integer(), nullable=True),
                      if_not_exists=True)
        op.add_column("agents", sa.Column("canary_percent", sa.SmallInteger(), nullable=True),
                      if_not_exists=True)
        op.add_column("agents", sa.Column("migrate_to", sa.Integer(), nullable=True),
                      if_not_exists=True)
        op.add_column("agents", sa.Column("migrate_map", JSONB(), nullable=True),
                      if_not_exists=True)
        # NOT VALID: added without reading the table; validated below under a weaker lock.
        online.lint_ignore(
            "ban-drop-constraint", "the same constraint is added back in this statement (rerun)"
        )
        op.execute(
            "ALTER TABLE agents DROP CONSTRAINT IF EXISTS ck_agents_canary_percent,"
            " ADD CONSTRAINT ck_agents_canary_percent CHECK"
            " (canary_percent IS NULL OR (canary_percent >= 1 AND canary_percent <= 99))"
            " NOT VALID"
        )

    online.with_lock_retries(columns, what="agents canary columns")
    op.execute("ALTER TABLE agents VALIDATE CONSTRAINT ck_agents_canary_percent")


def downgrade() -> None:
    op.drop_constraint("ck_agents_canary_percent", "agents", type_="check")
    op.drop_column("agents", "migrate_map")
    op.drop_column("agents", "migrate_to")
    op.drop_column("agents", "canary_percent")
    op.drop_column("agents", "canary_version")
