"""Host events: each host's journal cursor and stream status move from `journal-cursors.json`
beside the SQLite file into the store, so a new leader resumes where the old one was.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "journal_cursors",
        sa.Column("host", sa.Text, primary_key=True),
        sa.Column("cursor", sa.Text, nullable=True),
        sa.Column("status", sa.Text, nullable=False, server_default=""),
        sa.Column("updated_at", sa.Text, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the store is never migrated down")
