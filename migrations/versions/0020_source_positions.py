"""Source positions: where each consumer group is in each inbound partition, in the database.

One row per (consumer group, topic, partition): the next offset to read, everything below it
done (saved, skipped or dead-lettered). The consumer writes it after the work it covers was
committed, so on every server that has the row, the work it covers is there too (a standby
replays the primary's WAL in order); on assignment the consumer starts each partition here
rather than at Kafka's committed offset, which a failover with asynchronous replication can
leave ahead of what the promoted database holds. A new, small table: nothing existing is
locked or rewritten.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import online

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    online.set_lock_timeout()
    if online.table_exists("source_positions"):  # a rerun
        return
    op.create_table(
        "source_positions",
        sa.Column("consumer_group", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.PrimaryKeyConstraint(
            "consumer_group", "topic", "partition", name="pk_source_positions"
        ),
    )


def downgrade() -> None:
    op.drop_table("source_positions")
