"""Typing the timeline of a store made before it (schema 1 -> 2), in the write transaction of
the open that then stamps it for Alembic (`supervisor.record.store.revise`): the revisions take it
from there.

1 -> 2, the typed timeline: `timeline` gains `type` and `version`, and each old row's `data`
becomes the payload of the typed record `supervisor.record.timeline.migrate.type_v1` reads from its
kind, summary and data (its summary is kept: the record renders it back exactly, or the row is
a `Legacy` record holding it). `incidents` gains `diagnosis`: the latest matched diagnosis in its
timeline. The append-only trigger is lifted for this one rewrite and put back.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlalchemy import Connection

from supervisor.record.store.coltypes import dump_json
from supervisor.record.store.schema import NO_UPDATE
from supervisor.record.timeline.codec import encode
from supervisor.record.timeline.migrate import type_v1
from supervisor.record.timeline.repair import Diagnosis


def _v1_to_v2(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE incidents ADD COLUMN diagnosis TEXT")
    conn.exec_driver_sql("ALTER TABLE timeline ADD COLUMN type TEXT NOT NULL DEFAULT ''")
    conn.exec_driver_sql("ALTER TABLE timeline ADD COLUMN version INTEGER NOT NULL DEFAULT 1")
    conn.exec_driver_sql("DROP TRIGGER timeline_no_update")
    rows = conn.exec_driver_sql(
        "SELECT id, incident_id, kind, summary, data FROM timeline ORDER BY id"
    ).all()
    diagnoses: dict[int, str] = {}
    for row_id, incident_id, kind, summary, data in rows:
        record = type_v1(kind, summary, json.loads(data))
        conn.exec_driver_sql(
            "UPDATE timeline SET type = ?, version = ?, kind = ?, data = ? WHERE id = ?",
            (record.tag, record.version, record.kind.value, dump_json(encode(record)), row_id),
        )
        if isinstance(record, Diagnosis) and record.cause:
            diagnoses[incident_id] = record.cause
    for incident_id, cause in diagnoses.items():
        conn.exec_driver_sql(
            "UPDATE incidents SET diagnosis = ? WHERE id = ?", (cause, incident_id)
        )
    conn.exec_driver_sql(NO_UPDATE)


STEPS: dict[int, Callable[[Connection], None]] = {1: _v1_to_v2}
"""From version N: the step that makes it N + 1."""


def migrate(conn: Connection, version: int, target: int) -> None:
    """Run every step from `version` to `target` (inside the caller's write transaction)."""
    while version < target:
        STEPS[version](conn)
        version += 1
    conn.exec_driver_sql(f"PRAGMA user_version = {target}")
