"""The board's "last doctor run" panel: when `doctor` last ran, its counts, and what it found
wrong (failures first, then warnings), read from the store as `status` and Telegram's `/status`
read it (`supervisor.record.store.doctor`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from supervisor.record.store.doctor import last_doctor_run
from supervisor.record.store.errors import StoreError
from supervisor.record.store.store import Store

SHOWN = 10
"""Problems listed on the board (the rest: `fleet-supervisor doctor`)."""

ORDER = {"fail": 0, "warn": 1}


@dataclass(frozen=True, kw_only=True)
class Problem:
    status: str  #: `fail` or `warn`
    subject: str
    check: str
    detail: str
    fix: str


@dataclass(frozen=True, kw_only=True)
class DoctorPanel:
    at: datetime
    ok: bool
    summary: str  #: `40 ok, 1 warn, 2 fail in 2.3s`
    problems: tuple[Problem, ...]  #: the first SHOWN, failures first
    more: int  #: problems not listed

    @property
    def tone(self) -> str:
        if not self.ok:
            return "bad"
        return "warn" if self.problems else "good"


def _problems(document: Mapping[str, Any]) -> list[Problem]:
    found = [
        Problem(
            status=str(f.get("status", "")),
            subject=str(f.get("subject", "")),
            check=str(f.get("check", "")),
            detail=str(f.get("detail", "")),
            fix=str(f.get("fix", "")),
        )
        for f in document.get("findings", ())
        if isinstance(f, Mapping) and f.get("status") in ORDER
    ]
    return sorted(found, key=lambda p: ORDER[p.status])


async def doctor_panel(store: Store) -> DoctorPanel | None:
    """The last run (None: never run, or the store cannot be read now)."""
    try:
        record = await last_doctor_run(store)
    except StoreError:
        return None
    if record is None:
        return None
    problems = _problems(record.document)
    return DoctorPanel(
        at=record.at,
        ok=record.ok,
        summary=record.summary,
        problems=tuple(problems[:SHOWN]),
        more=max(len(problems) - SHOWN, 0),
    )
