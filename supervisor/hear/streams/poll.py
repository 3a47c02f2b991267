"""The fallback when a host's journal cannot be streamed: read the units' state with
`systemctl show` every so often and make events from what changed (source `poll`).

Polling sees states, not messages: a restart between two polls shows only as a higher
`NRestarts`, and `active -> inactive` with `Result=success` cannot tell a clean exit from a
stop (it is reported as `exited`). No journal lines are carried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from supervisor.hear.streams.events import EventKind
from supervisor.hear.streams.recognise import escalate

PROPERTIES: tuple[str, ...] = (
    "Id",
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainCode",
    "ExecMainStatus",
    "NRestarts",
)
_CLD_CODES = {"1": "exited", "2": "killed", "3": "dumped"}  #: ExecMainCode (si_code) -> text


@dataclass(frozen=True, kw_only=True)
class PolledUnit:
    """One unit as `systemctl show` tells it."""

    unit: str
    active_state: str
    sub_state: str
    result: str
    exit_code: str
    exit_status: int | None
    n_restarts: int | None

    def text(self) -> str:
        return f"{self.active_state}/{self.sub_state}"


def show_argv(units: Sequence[str]) -> list[str]:
    return ["systemctl", "show", "--no-pager", f"--property={','.join(PROPERTIES)}", *units]


def _int(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def parse_show(stdout: str) -> dict[str, PolledUnit]:
    """`systemctl show -p ... A B` (blocks of KEY=VALUE, a blank line between units) by unit."""
    states: dict[str, PolledUnit] = {}
    for block in stdout.strip().split("\n\n"):
        values = dict(line.partition("=")[::2] for line in block.splitlines() if "=" in line)
        unit = values.get("Id", "")
        if not unit:
            continue
        status = _int(values.get("ExecMainStatus", ""))
        code = _CLD_CODES.get(values.get("ExecMainCode", ""), "")
        states[unit] = PolledUnit(
            unit=unit,
            active_state=values.get("ActiveState", ""),
            sub_state=values.get("SubState", ""),
            result=values.get("Result", ""),
            exit_code=code,
            exit_status=status if code else None,
            n_restarts=_int(values.get("NRestarts", "")),
        )
    return states


@dataclass(frozen=True, kw_only=True)
class UnitChange:
    """What one poll found changed for one unit."""

    unit: str
    kind: EventKind
    message: str
    state: PolledUnit


def changes(
    before: Mapping[str, PolledUnit], after: Mapping[str, PolledUnit], crash_after: int
) -> list[UnitChange]:
    """The events between two polls (none for a unit seen for the first time)."""
    found: list[UnitChange] = []
    for unit, now in after.items():
        was = before.get(unit)
        if was is None:
            continue
        kind = _kind(was, now)
        if kind is None:
            continue
        if kind is EventKind.FAILED:
            kind = escalate(kind, max(0, (now.n_restarts or 0) - 1), now.result, crash_after)
        message = f"{unit}: {was.text()} -> {now.text()}, Result={now.result}"
        if now.n_restarts != was.n_restarts:
            message += f", NRestarts {was.n_restarts} -> {now.n_restarts}"
        found.append(UnitChange(unit=unit, kind=kind, message=message, state=now))
    return found


def _kind(was: PolledUnit, now: PolledUnit) -> EventKind | None:
    restarted = (now.n_restarts or 0) > (was.n_restarts or 0)
    if restarted or (now.active_state == "failed" and was.active_state != "failed"):
        return EventKind.FAILED
    if was.active_state == "active" and now.active_state in ("inactive", "deactivating"):
        return EventKind.EXITED
    if was.active_state != "active" and now.active_state == "active":
        return EventKind.STARTED
    return None
