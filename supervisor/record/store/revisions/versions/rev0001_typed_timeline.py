"""The store as of schema 2 (the typed timeline): incidents, snapshots, the append-only
timeline, samples, attempts.

A SQLite file made before Alembic (no `alembic_version`) already has these tables: as they are
(`PRAGMA user_version` 2), or with schema 1's timeline, which is typed here (1 -> 2):
`timeline` gains `type` and `version`, and each old row's `data` becomes the payload of the
typed record `supervisor.record.timeline.migrate.type_v1` reads from its kind, summary and data
(its summary is kept: the record renders it back exactly, or the row is a `Legacy` record holding
it). `incidents` gains `diagnosis`: the latest matched diagnosis in its timeline. The append-only
trigger is lifted for this one rewrite and put back.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import json

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
    bind = op.get_bind()
    if sa.inspect(bind).has_table("incidents"):
        _adopt(bind)
        return
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


def _adopt(bind: sa.Connection) -> None:
    """A SQLite file made before Alembic: schema 2 as it is, schema 1 typed."""
    if "type" in {c["name"] for c in sa.inspect(bind).get_columns("timeline")}:
        return
    # the readers of schema 1's rows, loaded for such a store only
    from supervisor.record.store.coltypes import dump_json
    from supervisor.record.timeline.codec import encode
    from supervisor.record.timeline.migrate import type_v1
    from supervisor.record.timeline.repair import Diagnosis

    op.add_column("incidents", sa.Column("diagnosis", sa.Text, nullable=True))
    op.add_column("timeline", sa.Column("type", sa.Text, nullable=False, server_default=""))
    op.add_column("timeline", sa.Column("version", sa.Integer, nullable=False, server_default="1"))
    op.execute("DROP TRIGGER timeline_no_update")
    rows = bind.exec_driver_sql(
        "SELECT id, incident_id, kind, summary, data FROM timeline ORDER BY id"
    ).all()
    diagnoses: dict[int, str] = {}
    for row_id, incident_id, kind, summary, data in rows:
        record = type_v1(kind, summary, json.loads(data))
        bind.exec_driver_sql(
            "UPDATE timeline SET type = ?, version = ?, kind = ?, data = ? WHERE id = ?",
            (record.tag, record.version, record.kind.value, dump_json(encode(record)), row_id),
        )
        if isinstance(record, Diagnosis) and record.cause:
            diagnoses[incident_id] = record.cause
    for incident_id, cause in diagnoses.items():
        bind.exec_driver_sql(
            "UPDATE incidents SET diagnosis = ? WHERE id = ?", (cause, incident_id)
        )
    op.execute(SQLITE_TRIGGERS[0])


def downgrade() -> None:
    raise NotImplementedError("the store is never migrated down")
