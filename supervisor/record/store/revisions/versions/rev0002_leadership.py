"""Leadership: the lease row and the journal of who led when; an attempt carries the epoch it
ran under.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("epoch", sa.Integer, nullable=True))
    op.create_table(
        "leader_lease",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False, server_default="0"),
        sa.Column("acquired_ms", sa.BigInteger, nullable=False),
        sa.Column("renewed_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
        sa.Column("released", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_table(
        "leader_journal",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
    )


def downgrade() -> None:
    raise NotImplementedError("the store is never migrated down")
