"""Collectors for a Mac host: `mac_listeners` (who listens on a TCP port) and `mac_memory`
(memory pressure and where the pages are).

Processes need no Mac collector of their own: the `processes` collector's
`ps -ww -eo pid=,user=,args=` means the same to macOS's BSD ps (ps(1): `-e` is "Identical to
-A", `-ww` never cuts the command, `=` drops the header), and `ps -ww -o pid=,args= -p PID,...`
likewise.

Sources of the shapes parsed here (recorded under `tests/data/evidence/macos/`):

- lsof(8) and its FAQ: `lsof -nP -iTCP:PORT -sTCP:LISTEN` prints a `COMMAND PID USER FD TYPE
  DEVICE SIZE/OFF NODE NAME` header, then one line per socket (`Python 48213 milo 7u IPv4 0x...
  0t0 TCP *:8013 (LISTEN)`), COMMAND cut to 9 characters with spaces as `\\x20`; it exits 1 and
  prints nothing when nothing matches. Without root it lists only the SSH user's sockets.
- memory_pressure(1) `-Q`: `The system has 137438953472 (8388608 pages with a page size of
  16384).` then `System-wide memory free percentage: 84%` (public captures from Mac Studios);
  the level is `sysctl kern.memorystatus_vm_pressure_level`: 1 normal, 2 warn, 4 critical (what
  Activity Monitor's green, yellow and red show; an Ask Different answer and xnu's
  `kern_memorystatus.c`).
- vm_stat(1): `Mach Virtual Memory Statistics: (page size of 16384 bytes)` then `Pages free:
  52431.` lines (a trailing dot; 16 KiB pages on Apple silicon, 4 KiB on Intel Macs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field

from supervisor.config.fields import Flag
from supervisor.execute.base import CommandResult
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    CollectorParams,
    FactValue,
    NoEvidenceParams,
)
from supervisor.playbook.evidence.declare import collector, failed, failure, found, run_read
from supervisor.playbook.evidence.launchctl import NotLaunchdError, parse_print, print_argv
from supervisor.playbook.evidence.network import parse_pid_args

_PAGE_SIZE = re.compile(r"page size of (\d+)")
_FREE_PERCENT = re.compile(r"System-wide memory free percentage:\s*(\d+)%")
_TOTAL = re.compile(r"The system has (\d+)")
LEVELS: Mapping[str, str] = {"1": "normal", "2": "warn", "4": "critical"}
GIB = 1024**3
#: vm_stat line -> fact (GiB)
VM_STAT_FIELDS: Mapping[str, str] = {
    "Pages free": "free_gib",
    "Pages active": "active_gib",
    "Pages inactive": "inactive_gib",
    "Pages wired down": "wired_gib",
    "Pages occupied by compressor": "compressed_gib",
}


class MacListenersParams(CollectorParams):
    port: Annotated[int, Field(strict=True, ge=1, le=65535)] | None = Field(
        default=None, description="the TCP port (default: the port of the endpoint's URL)"
    )
    as_root: Flag = Field(
        default=False, description="run lsof with `sudo -n` to see other users' sockets too"
    )


def parse_lsof(text: str) -> list[tuple[int, str, str]]:
    """`lsof -nP -iTCP -sTCP:LISTEN` lines -> (pid, command, user) per socket, header left out.
    lsof writes a space inside COMMAND as `\\x20`, so the first three columns split on blanks."""
    sockets: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 3 and words[1].isascii() and words[1].isdigit():
            sockets.append((int(words[1]), words[0].replace("\\x20", " "), words[2]))
    return sockets


def macos_listener_facts(
    sockets: list[tuple[int, str, str]], args: Mapping[int, str], job_pid: int | None
) -> dict[str, FactValue]:
    owners: dict[int, tuple[str, str]] = {}
    for pid, command, user in sockets:
        owners.setdefault(pid, (command, user))
    facts: dict[str, FactValue] = {
        "count": len(sockets),
        "pids": tuple(owners),
        "commands": tuple(args.get(pid, name) for pid, (name, _) in owners.items()),
        "users": tuple(user for _, user in owners.values()),
    }
    if job_pid is not None:
        facts["job_pid"] = job_pid
        facts["held_by_job"] = job_pid in owners
        facts["held_by_other"] = any(pid != job_pid for pid in owners)
    return facts


def endpoint_port(url: str) -> int | None:
    """The port of an endpoint's URL (80/443 when it names none)."""
    try:
        parts = urlsplit(url)
        return parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None


async def _job_pid(ctx: CollectContext) -> tuple[CommandResult | None, int | None]:
    """The scope's launchd job's pid (0 when it runs none); None without a launchd unit."""
    unit = ctx.scope.unit
    if unit is None or unit.domain is None:
        return None, None
    try:
        argv = print_argv(unit)
    except NotLaunchdError:
        return None, None
    result = await run_read(ctx, argv)
    return result, parse_print(result.stdout).pid if result.ok else 0


@collector(
    "mac_listeners",
    params=MacListenersParams,
    doc="who listens on a TCP port of a Mac (launchd hosts only; default port: the endpoint's): "
    "`lsof -nP -iTCP:PORT -sTCP:LISTEN` (the SSH user's sockets unless `as_root`), `ps`, and "
    "for a launchd unit `launchctl print` (whether its job holds the port)",
    facts={
        "count": "listening sockets on the port (IPv4 and IPv6 count apart)",
        "pids": "the owners' pids, each once",
        "commands": "each owner's command line, in the order of `pids`",
        "users": "each owner's user, in the order of `pids`",
        "job_pid": "the scope's launchd job's pid (0 when it runs none); absent without one",
        "held_by_job": "the job's process is one of the owners",
        "held_by_other": "a process other than the job's holds the port",
    },
    service_manager="launchd",
)
async def mac_listeners(ctx: CollectContext, params: MacListenersParams) -> CollectedEvidence:
    port = params.port or endpoint_port(ctx.scope.endpoint.url)
    if port is None:
        return failed(f"no port in {ctx.scope.endpoint.url}: give `port`")
    argv = ["lsof", "-nP", f"-iTCP:{port}", "-sTCP:LISTEN"]
    lsof = await run_read(ctx, argv, sudo=params.as_root)
    quiet = not lsof.error and lsof.exit_status == 1 and not (lsof.stdout + lsof.stderr).strip()
    if not lsof.ok and not quiet:  # exit 1 saying nothing: nothing listens
        return failed(failure("lsof", lsof), lsof)
    results = [lsof]
    printed, job_pid = await _job_pid(ctx)
    if printed is not None:
        results.append(printed)
    sockets = parse_lsof(lsof.stdout)
    pids = ",".join(dict.fromkeys(str(pid) for pid, _, _ in sockets))
    args: dict[int, str] = {}
    if pids:
        ps = await run_read(ctx, ["ps", "-ww", "-o", "pid=,args=", "-p", pids])
        results.append(ps)
        if ps.error or ps.exit_status not in (0, 1):  # 1: none of them is alive any more
            return failed(failure("ps", ps), *results)
        args = parse_pid_args(ps.stdout)
    return found(macos_listener_facts(sockets, args, job_pid), *results)


def parse_memory_pressure(text: str) -> dict[str, FactValue]:
    """`memory_pressure -Q` -> free percentage and total memory (each absent when not said)."""
    facts: dict[str, FactValue] = {}
    free = _FREE_PERCENT.search(text)
    if free:
        facts["free_percent"] = int(free.group(1))
    total = _TOTAL.search(text)
    if total:
        facts["total_gib"] = round(int(total.group(1)) / GIB, 1)
    return facts


def parse_pressure_level(text: str) -> str:
    """`sysctl -n kern.memorystatus_vm_pressure_level` -> normal, warn, critical or unknown."""
    return LEVELS.get(text.strip(), "unknown")


def parse_vm_stat(text: str) -> dict[str, FactValue]:
    """`vm_stat` -> the page size it states and the page counts of `VM_STAT_FIELDS` in GiB;
    nothing without the page-size header (page counts alone cannot be converted)."""
    size = _PAGE_SIZE.search(text)
    if not size:
        return {}
    page = int(size.group(1))
    facts: dict[str, FactValue] = {"page_size": page}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        fact = VM_STAT_FIELDS.get(name.strip().strip('"'))
        count = rest.strip().rstrip(".")
        if sep and fact and count.isascii() and count.isdigit():
            facts[fact] = round(int(count) * page / GIB, 1)
    return facts


@collector(
    "mac_memory",
    params=NoEvidenceParams,
    doc="a Mac's memory (launchd hosts only): `memory_pressure -Q`, "
    "`sysctl -n kern.memorystatus_vm_pressure_level`, "
    "`vm_stat` (no root)",
    facts={
        "free_percent": "memory_pressure's system-wide memory free percentage",
        "pressure_level": "`normal`, `warn`, `critical` (Activity Monitor's green, yellow, red), "
        "or `unknown`",
        "total_gib": "physical memory, GiB",
        "page_size": "bytes per page, as vm_stat states it (16384 on Apple silicon)",
        "free_gib": "free pages, GiB",
        "active_gib": "active pages, GiB",
        "inactive_gib": "inactive pages, GiB",
        "wired_gib": "wired pages, GiB (Metal buffers of a loaded model are wired)",
        "compressed_gib": "pages occupied by the compressor, GiB",
    },
    service_manager="launchd",
)
async def mac_memory(ctx: CollectContext, params: NoEvidenceParams) -> CollectedEvidence:
    pressure = await run_read(ctx, ["memory_pressure", "-Q"])
    if not pressure.ok:
        return failed(failure("memory_pressure", pressure), pressure)
    level = await run_read(ctx, ["sysctl", "-n", "kern.memorystatus_vm_pressure_level"])
    if not level.ok:
        return failed(failure("sysctl", level), pressure, level)
    vm_stat = await run_read(ctx, ["vm_stat"])
    if not vm_stat.ok:
        return failed(failure("vm_stat", vm_stat), pressure, level, vm_stat)
    pages = parse_vm_stat(vm_stat.stdout)
    if not pages:
        return failed("vm_stat printed no page size", pressure, level, vm_stat)
    facts = {
        **parse_memory_pressure(pressure.stdout),
        "pressure_level": parse_pressure_level(level.stdout),
        **pages,
    }
    return found(facts, pressure, level, vm_stat)
