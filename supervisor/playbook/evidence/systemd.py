"""Collectors that ask systemd about the scope's unit: `unit_status` and `command_line`.

Both only read (`systemctl show` needs no root). A unit systemd does not know is not an error:
`systemctl show` answers `LoadState=not-found`, which rules can test. `unit_status` samples again
while the unit may be caught mid-attempt in a crash loop (see
`supervisor.playbook.evidence.settling`).
"""

from __future__ import annotations

from collections.abc import Mapping

from supervisor.execute.base import CommandResult
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    FactValue,
    NoEvidenceParams,
)
from supervisor.playbook.evidence.declare import (
    collector,
    failed,
    failure,
    found,
    run_read,
    scope_unit,
)
from supervisor.playbook.evidence.execstart import parse_exec_start
from supervisor.playbook.evidence.settling import PAUSE, Settling

PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainStatus",
    "ExecMainCode",
    "ExecMainPID",
    "MainPID",
    "NRestarts",
    "ExecStart",
    "DropInPaths",
    "FragmentPath",
    "User",
    "ActiveEnterTimestampMonotonic",
)
#: property -> fact, for the properties that are plain text
_TEXT = {
    "LoadState": "load_state",
    "ActiveState": "active_state",
    "SubState": "sub_state",
    "Result": "result",
    "FragmentPath": "fragment_path",
    "User": "user",
}
#: property -> fact, for the properties that are numbers (absent when systemd gives none)
_NUMBER = {
    "ExecMainStatus": "exec_main_status",
    "ExecMainCode": "exec_main_code",
    "ExecMainPID": "exec_main_pid",
    "MainPID": "main_pid",
    "NRestarts": "n_restarts",
    "ActiveEnterTimestampMonotonic": "active_enter_monotonic_us",
}
_UNSET = frozenset({"", "[not set]", "[n/a]"})

UNIT_STATUS_FACTS = {
    "load_state": "`loaded`, or `not-found` for a unit systemd does not know",
    "active_state": "`active`, `activating`, `inactive`, `failed` ...",
    "sub_state": "`running`, `auto-restart`, `dead`, `failed` ...",
    "result": "`success`, `exit-code`, `signal`, `start-limit-hit`, `oom-kill` ...",
    "exec_main_status": "exit status of the last main process (127, 203 ...); absent if none",
    "exec_main_code": "how it ended: 1 exited, 2 killed, 3 dumped; absent if none",
    "exec_main_pid": "pid of the last main process (0 if none)",
    "main_pid": "pid of the running main process (0 if none)",
    "n_restarts": "automatic restarts since the last manual start",
    "exec_start": "ExecStart= as systemd prints it (raw; several commands one per line)",
    "exec_start_argv": "the first command's argv, joined by spaces",
    "exec_start_path": "the executable systemd runs (`path=`, else argv[0])",
    "exec_start_script": "the script a `bash`/`sh` in argv runs (inside a `docker exec` too), "
    "else the command a `docker exec` runs, else argv[0]",
    "exec_start_container": "CONTAINER of `docker exec [flags] CONTAINER ...`, else ''",
    "drop_in_paths": "drop-in files that change the unit",
    "fragment_path": "the unit file ('' for a unit systemd does not know)",
    "user": "User= ('' means root)",
    "active_enter_monotonic_us": "when it last became active, µs of monotonic clock (0 never)",
    "samples": "how many times `systemctl show` ran: a unit restarted by systemd that looks "
    "running is sampled again until one attempt has run 2 s (a crash-loop attempt lives less)",
    "settled": "false when the unit still looked freshly restarted at the deadline (the "
    "evidence timeout): the facts are then its last sample",
}


def show_properties(text: str) -> dict[str, list[str]]:
    """`Key=Value` lines of `systemctl show`, every value of a repeated key kept in order."""
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            values.setdefault(key, []).append(value.strip())
    return values


def _number(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def parse_unit_status(text: str) -> dict[str, FactValue]:
    """The `unit_status` facts of a `systemctl show -p ...` answer."""
    properties = show_properties(text)
    facts: dict[str, FactValue] = {}
    for name, fact in _TEXT.items():
        if name in properties:
            value = properties[name][0]
            facts[fact] = "" if value in _UNSET else value
    for name, fact in _NUMBER.items():
        number = _number(properties.get(name, [""])[0])
        if number is not None:
            facts[fact] = number
    commands = [value for value in properties.get("ExecStart", []) if value not in _UNSET]
    first = parse_exec_start(commands[0] if commands else "")
    facts["exec_start"] = "\n".join(commands)
    facts["exec_start_argv"] = first.argv_text
    facts["exec_start_path"] = first.path
    facts["exec_start_script"] = first.script
    facts["exec_start_container"] = first.container
    drop_ins = properties.get("DropInPaths", [""])[0]
    facts["drop_in_paths"] = () if drop_ins in _UNSET else tuple(drop_ins.split())
    return facts


@collector(
    "unit_status",
    params=NoEvidenceParams,
    doc="the unit's state, last exit and ExecStart: `systemctl show UNIT -p ...` (no root), "
    "sampled again (every 0.5 s, up to the evidence timeout) while a unit systemd restarted "
    "may be caught mid-attempt in a crash loop",
    facts=UNIT_STATUS_FACTS,
    needs_unit=True,
    service_manager="systemd",
)
async def unit_status(ctx: CollectContext, params: NoEvidenceParams) -> CollectedEvidence:
    unit = scope_unit(ctx)
    argv = ["systemctl", "show", unit.unit, "-p", ",".join(PROPERTIES), "--no-pager"]
    settling = Settling()
    deadline = ctx.clock.monotonic() + ctx.timeout.total_seconds()
    results: list[CommandResult] = []
    while True:
        result = await run_read(ctx, argv)
        results.append(result)
        if not result.ok:
            return failed(failure("systemctl show", result), *results)
        facts = parse_unit_status(result.stdout)
        now = ctx.clock.monotonic()
        settled = settling.settled(facts, now)
        if settled or now + PAUSE > deadline:
            return found({**facts, "samples": len(results), "settled": settled}, *results)
        await ctx.pause(PAUSE)


def parse_main_pid(text: str) -> int | None:
    """`systemctl show -p MainPID --value`: the pid (0 when nothing runs), None if unreadable."""
    number = _number(text.strip())
    return number if number is not None and number >= 0 else None


def parse_ps_args(text: str) -> Mapping[str, FactValue]:
    """`ps -ww -o args= -p PID`: the command line, or not running for an empty answer."""
    args = text.strip()
    return {"args": args, "running": bool(args)}


@collector(
    "command_line",
    params=NoEvidenceParams,
    doc="the running main process's command line: `systemctl show -p MainPID`, `ps` (no root)",
    facts={
        "args": "the main process's command line ('' when it is not running)",
        "running": "whether the unit has a live main process",
    },
    needs_unit=True,
    service_manager="systemd",
)
async def collect_command_line(ctx: CollectContext, params: NoEvidenceParams) -> CollectedEvidence:
    unit = scope_unit(ctx)
    show = await run_read(ctx, ["systemctl", "show", unit.unit, "-p", "MainPID", "--value"])
    if not show.ok:
        return failed(failure("systemctl show", show), show)
    pid = parse_main_pid(show.stdout)
    if pid is None:
        return failed(f"systemctl show gave no MainPID: {show.stdout.strip()!r}", show)
    if pid == 0:
        return found(parse_ps_args(""), show)
    ps = await run_read(ctx, ["ps", "-ww", "-o", "args=", "-p", str(pid)])
    if ps.error or ps.exit_status not in (0, 1):  # 1: the process is already gone
        return failed(failure("ps", ps), show, ps)
    return found(parse_ps_args(ps.stdout if ps.exit_status == 0 else ""), show, ps)
