"""The store as of schema 2 (the typed timeline): incidents, snapshots, the append-only
timeline, samples, attempts. A store made before Alembic (SQLite `user_version` 2, or 1 once
`supervisor.record.store.migrate` typed its timeline) is stamped at this revision.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_MESSAGE = "timeline is append-only"
SQLITE_TRIGGERS = (
    f"""CREATE TRIGGER timeline_no_update BEFORE UPDATE ON timeline
    BEGIN SELECT RAISE(ABORT, '{_MESSAGE}'); END""",
    f"""CREATE TRIGGER timeline_no_delete BEFORE DELETE ON timeline
    BEGIN SELECT RAISE(ABORT, '{_MESSAGE}'); END""",
    """CREATE TRIGGER timeline_count AFTER INSERT ON timeline
    BEGIN UPDATE incidents SET entries = entries + 1 WHERE id = NEW.incident_id; END""",
)
PG_TRIGGERS = (
    f"""CREATE FUNCTION timeline_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION '{_MESSAGE}'; END $$""",
    """CREATE TRIGGER timeline_no_update BEFORE UPDATE OR DELETE ON timeline
    FOR EACH ROW EXECUTE FUNCTION timeline_append_only()""",
    """CREATE FUNCTION timeline_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN UPDATE incidents SET entries = entries + 1 WHERE id = NEW.incident_id;
    RETURN NEW; END $$""",
    """CREATE TRIGGER timeline_count AFTER INSERT ON timeline
    FOR EACH ROW EXECUTE FUNCTION timeline_count()""",
)


def upgrade() -> None:
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("subject_kind", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("opened_at", sa.Text, nullable=False),
        sa.Column("closed_at", sa.Text, nullable=True),
        sa.Column("cause", sa.Text, nullable=False),
        sa.Column("diagnosis", sa.Text, nullable=True),
        sa.Column("resolution", sa.Text, nullable=True),
        sa.Column("last_state", sa.Text, nullable=False),
        sa.Column("entries", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index(
        "ux_incidents_open",
        "incidents",
        ["subject_kind", "subject"],
        unique=True,
        sqlite_where=sa.text("closed_at IS NULL"),
        postgresql_where=sa.text("closed_at IS NULL"),
    )
    op.create_index("ix_incidents_opened_at", "incidents", ["opened_at"])
    op.create_index("ix_incidents_subject", "incidents", ["subject", "opened_at"])
    op.create_table(
        "snapshots",
        sa.Column("kind", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("since", sa.Text, nullable=False),
        sa.Column("incident_id", sa.Integer, sa.ForeignKey("incidents.id"), nullable=True),
        sa.Column("fail_streak", sa.Integer, nullable=False),
        sa.Column("degraded_streak", sa.Integer, nullable=False),
        sa.Column("grace_until", sa.Text, nullable=True),
        sa.Column("last_ok_at", sa.Text, nullable=True),
        sa.Column("last_ttft_s", sa.Float, nullable=True),
        sa.Column("last_tok_s", sa.Float, nullable=True),
        sa.Column("last_reason", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Text, nullable=False),
    )
    op.create_table(
        "timeline",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("incident_id", sa.Integer, sa.ForeignKey("incidents.id"), nullable=False),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("type", sa.Text, nullable=False, server_default=""),
        sa.Column("version", sa.Integer, nullable=False, server_default="1"),
    )
    op.create_index("ix_timeline_incident", "timeline", ["incident_id", "id"])
    op.create_table(
        "samples",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("endpoint", sa.Text, nullable=False),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("tier", sa.Text, nullable=False),
        sa.Column("check", sa.Text, nullable=False),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("latency_s", sa.Float, nullable=False),
        sa.Column("http_status", sa.Integer, nullable=True),
        sa.Column("ttft_s", sa.Float, nullable=True),
        sa.Column("tok_s", sa.Float, nullable=True),
        sa.Column("tokens", sa.Integer, nullable=True),
    )
    op.create_index("ix_samples_endpoint_at", "samples", ["endpoint", "at"])
    op.create_index("ix_samples_at", "samples", ["at"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("endpoint", sa.Text, nullable=False),
        sa.Column("rule_id", sa.Text, nullable=False),
        sa.Column("incident_id", sa.Integer, sa.ForeignKey("incidents.id"), nullable=True),
        sa.Column("started_at", sa.Text, nullable=False),
        sa.Column("finished_at", sa.Text, nullable=True),
        sa.Column("outcome", sa.Text, nullable=True),
    )
    op.create_index("ix_attempts_endpoint", "attempts", ["endpoint", "started_at"])
    postgresql = op.get_bind().dialect.name == "postgresql"
    for sql in PG_TRIGGERS if postgresql else SQLITE_TRIGGERS:
        op.execute(sql)


def downgrade() -> None:
    raise NotImplementedError("the store is never migrated down")
