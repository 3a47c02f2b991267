"""The queued writes a store took, by identity (`spill_writes`): a spill file's writes left by a
process that died while its store refused them are replayed on the next start, each once.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spill_writes",
        sa.Column("spill", sa.Text, primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("result", sa.Text, nullable=True),
    )


def downgrade() -> None:
    raise NotImplementedError("the store is never migrated down")
