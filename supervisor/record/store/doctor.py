"""The last `doctor` runs, in the store (`doctor_runs`, made by the store's revisions): what
`status`, `/status` and the page show as "last doctor run"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Integer, MetaData, Table, Text, select

from supervisor.record.store.coltypes import JSONData, UTCDateTime
from supervisor.record.store.store import Store

doctor_metadata = MetaData()

doctor_runs = Table(
    "doctor_runs",
    doctor_metadata,
    Column("id", Integer, primary_key=True),
    Column("at", UTCDateTime, nullable=False),
    Column("ok", Integer, nullable=False),  # 1: no check failed
    Column("summary", Text, nullable=False),  # `40 ok, 1 warn, 0 fail in 2.3s`
    Column("document", JSONData, nullable=False),  # the `doctor --json` document
)


@dataclass(frozen=True, kw_only=True)
class DoctorRecord:
    at: datetime
    ok: bool
    summary: str
    document: Mapping[str, Any]

    def as_status(self) -> dict[str, Any]:
        """`status --json`'s and `/status`'s `doctor`."""
        at = self.at.isoformat().replace("+00:00", "Z")
        return {"at": at, "ok": self.ok, "summary": self.summary, "line": self.line()}

    def line(self) -> str:
        """`last doctor run 2026-11-26 13:40 UTC: 40 ok, 0 warn, 0 fail in 2.3s`."""
        when = self.at.strftime("%Y-%m-%d %H:%M UTC")
        return f"last doctor run {when}: {self.summary}"


async def save_doctor_run(
    store: Store, *, at: datetime, ok: bool, summary: str, document: Mapping[str, Any]
) -> None:
    async with store.tx(write=True) as conn:
        values = {"at": at, "ok": int(ok), "summary": summary, "document": dict(document)}
        await conn.execute(doctor_runs.insert().values(**values))


async def last_doctor_run(store: Store) -> DoctorRecord | None:
    async with store.tx(write=False) as conn:
        query = select(doctor_runs).order_by(doctor_runs.c.id.desc()).limit(1)
        row = (await conn.execute(query)).first()
    if row is None:
        return None
    return DoctorRecord(at=row.at, ok=bool(row.ok), summary=row.summary, document=row.document)
