"""One reader of a unit's state, for the diagnosis's settle wait (`restarts`) and the unit
actions (`supervisor.playbook.actions`) alike: what `systemctl show` or `launchctl print`
answered, parsed once (`systemd_facts`, `launchd_facts`), and the `UnitState` an action reports
(`systemd_state`, `launchd_state`). Each caller runs the command through its own executor."""

from __future__ import annotations

import re
from dataclasses import dataclass

from supervisor.execute.base import CommandResult
from supervisor.playbook.evidence.base import FactValue
from supervisor.playbook.evidence.launchctl import is_not_found, job_facts, parse_print
from supervisor.playbook.evidence.systemd import show_properties

#: the start timeout counted into the bound at most (`TimeoutStartSec=infinity`, or 90 s of a
#: unit whose start never ends: a live process is `running` after SETTLE anyway)
START_CAP = 30.0
#: launchd's throttle interval when `launchctl print` does not say (`minimum runtime`)
LAUNCHD_THROTTLE = 10.0
#: systemd states in which a unit is running or on its way
ALIVE_STATES = frozenset({"active", "activating", "reloading"})

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d|w|y|month)?")
_UNITS = {
    None: 1.0,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "month": 2629800.0,
    "y": 31557600.0,
}


@dataclass(frozen=True, kw_only=True)
class UnitState:
    """What one unit is doing now, as its service manager says (read, never changed)."""

    host: str
    unit: str
    #: systemd `ActiveState/SubState` (`active/running`, `failed/failed`); launchd the job's
    #: `state` (`running`, `not running`) or `not loaded`; '' when it could not be read
    state: str
    alive: bool  #: running or on its way (systemd active, activating, reloading; launchd running)
    pid: int = 0  #: the main process (0: none)
    error: str = ""  #: why it could not be read

    @property
    def label(self) -> str:
        return f"{self.unit}@{self.host}"


def timespan_s(text: str) -> float | None:
    """systemd's `1min 30s`, `3s`, `100ms` in seconds; None for `infinity` or nonsense."""
    text = text.strip()
    if not text or text == "infinity":
        return None
    total, end = 0.0, 0
    for match in _SPAN.finditer(text):
        if text[end : match.start()].strip():
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        end = match.end()
    return total if text[end:].strip() == "" and end else None


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


def systemd_facts(text: str) -> dict[str, FactValue]:
    """The state facts of a `systemctl show -p ...` answer (what was not asked is a default)."""
    found = {key: values[0] for key, values in show_properties(text).items()}
    return {
        "active_state": found.get("ActiveState", ""),
        "sub_state": found.get("SubState", ""),
        "result": found.get("Result", ""),
        "exec_main_code": _int(found.get("ExecMainCode", "")),
        "exec_main_status": _int(found.get("ExecMainStatus", "")),
        "main_pid": _int(found.get("MainPID", "")),
        "n_restarts": _int(found.get("NRestarts", "")),
        "active_enter_monotonic_us": _int(found.get("ActiveEnterTimestampMonotonic", "")),
        "exec_main_start_us": _int(found.get("ExecMainStartTimestampMonotonic", "")),
        "restart": found.get("Restart", "no"),
        "restart_s": timespan_s(found.get("RestartUSec", "")) or 0.0,
        "start_timeout_s": timespan_s(found.get("TimeoutStartUSec", "")) or START_CAP,
    }


def launchd_facts(result: CommandResult) -> dict[str, FactValue] | None:
    """The job's facts from `launchctl print` (`loaded` False when launchd has no such job);
    None when it could not be asked."""
    if result.ok:
        job = parse_print(result.stdout)
        facts = job_facts(job)
        throttle = timespan_s(job.keys.get("minimum runtime", ""))
        facts["throttle_s"] = throttle if throttle is not None else LAUNCHD_THROTTLE
        return facts
    if not result.error and is_not_found(result.exit_status, result.stderr):
        return {"loaded": False, "state": "", "runs": 0, "last_exit": "not loaded"}
    return None


def systemd_state(host: str, unit: str, result: CommandResult, *, unreadable: str) -> UnitState:
    """The unit's state from `systemctl show -p ActiveState,SubState,MainPID`; `unreadable` is
    why, when the command failed."""
    facts = systemd_facts(result.stdout) if result.ok else {}
    active = str(facts.get("active_state", ""))
    if not active:
        said = unreadable if not result.ok else "systemctl show gave no ActiveState"
        return UnitState(host=host, unit=unit, state="", alive=False, error=said)
    pid = facts.get("main_pid", 0)
    return UnitState(
        host=host,
        unit=unit,
        state=f"{active}/{facts.get('sub_state', '')}",
        alive=active in ALIVE_STATES,
        pid=pid if isinstance(pid, int) else 0,
    )


def launchd_state(host: str, unit: str, result: CommandResult, *, unreadable: str) -> UnitState:
    """The job's state from `launchctl print`; `unreadable` is why, when the command failed."""
    facts = launchd_facts(result)
    if facts is None:
        return UnitState(host=host, unit=unit, state="", alive=False, error=unreadable)
    if facts.get("loaded") is False:
        return UnitState(host=host, unit=unit, state="not loaded", alive=False)
    pid = facts.get("pid", 0)
    return UnitState(
        host=host,
        unit=unit,
        state=str(facts.get("state", "")),
        alive=facts.get("running") is True,
        pid=pid if isinstance(pid, int) else 0,
    )
