"""Availability: every state each subject entered (`state_log`) and the daemon's runs
(`supervision`), so time serving and time supervised are read from the store.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "state_log",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("subject_kind", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
        sa.Column("serving_ms", sa.BigInteger, nullable=False),
        sa.Column("down_ms", sa.BigInteger, nullable=False),
        sa.Column("silenced_ms", sa.BigInteger, nullable=False),
        sa.Column("unsupervised_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_state_log_subject", "state_log", ["subject_kind", "subject", "at_ms", "id"])
    op.create_index("ix_state_log_at", "state_log", ["at_ms"])
    op.create_table(
        "supervision",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("started_ms", sa.BigInteger, nullable=False, unique=True),
        sa.Column("seen_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the store is never migrated down")
