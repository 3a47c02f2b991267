"""What one doctor run found: a row per subject (endpoint, host, the store) and check."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True, kw_only=True)
class Finding:
    subject: str  #: `ds4`, `spark1`, `store`
    check: str  #: `ssh`, `unit vllm-ds4-head.service@spark1`, `rule eaddrinuse-29501`
    status: Status
    detail: str  #: what was found, one line
    fix: str = ""  #: one line, what to do (when not ok)

    def document(self) -> dict[str, str]:
        return {
            "subject": self.subject,
            "check": self.check,
            "status": str(self.status),
            "detail": self.detail,
            "fix": self.fix,
        }


def ok(subject: str, check: str, detail: str) -> Finding:
    return Finding(subject=subject, check=check, status=Status.OK, detail=detail)


def warn(subject: str, check: str, detail: str, fix: str) -> Finding:
    return Finding(subject=subject, check=check, status=Status.WARN, detail=detail, fix=fix)


def fail(subject: str, check: str, detail: str, fix: str) -> Finding:
    return Finding(subject=subject, check=check, status=Status.FAIL, detail=detail, fix=fix)


@dataclass(frozen=True, kw_only=True)
class DoctorRun:
    at: datetime
    took_s: float
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    def count(self, status: Status) -> int:
        return sum(1 for finding in self.findings if finding.status is status)

    @property
    def ok(self) -> bool:
        return self.count(Status.FAIL) == 0

    def summary(self) -> str:
        """`12 ok, 1 warn, 2 fail in 3.4s`."""
        counts = ", ".join(f"{self.count(s)} {s}" for s in Status)
        return f"{counts} in {self.took_s:.1f}s"

    def document(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "took_s": round(self.took_s, 3),
            "ok": self.ok,
            "summary": self.summary(),
            "findings": [finding.document() for finding in self.findings],
        }
