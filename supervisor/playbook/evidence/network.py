"""The `listeners` collector: who listens on a TCP port, with each owner's command line.

`ss -Hltnp 'sport = :PORT'` names the owners (root is needed to see other users' sockets):
`LISTEN 0 128 0.0.0.0:29501 0.0.0.0:* users:(("VLLM::Worker_TP",pid=4242,fd=7))`. The owners'
full command lines come from one `ps -ww -o pid=,args= -p PID,...`; when ps cannot tell (the
process just ended) the name ss printed stands in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from supervisor.execute.shape import Shape, fixed
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    CollectorParams,
    FactValue,
    Scope,
)
from supervisor.playbook.evidence.declare import collector, failed, failure, found, run_read

_OWNER = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=(\d+),fd=\d+\)')


class ListenersParams(CollectorParams):
    port: Annotated[int, Field(strict=True, ge=1, le=65535)]


@dataclass(frozen=True, kw_only=True)
class Sockets:
    """What `ss` said: how many listening sockets, and their owners (pid -> process name)."""

    count: int
    owners: Mapping[int, str]


def parse_ss(text: str) -> Sockets:
    """`ss -Hltnp` lines -> listening sockets and their distinct owners, in order of appearance."""
    count = 0
    owners: dict[int, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        count += 1
        for name, pid in _OWNER.findall(line):
            owners.setdefault(int(pid), name)
    return Sockets(count=count, owners=owners)


def parse_pid_args(text: str) -> dict[int, str]:
    """`ps -ww -o pid=,args=` lines -> {pid: command line}."""
    lines: dict[int, str] = {}
    for line in text.splitlines():
        pid, _, args = line.strip().partition(" ")
        if pid.isascii() and pid.isdigit() and args.strip():
            lines[int(pid)] = args.strip()
    return lines


def listener_facts(sockets: Sockets, args: Mapping[int, str]) -> dict[str, FactValue]:
    pids = tuple(sockets.owners)
    commands = tuple(args.get(pid, name) for pid, name in sockets.owners.items())
    return {"count": sockets.count, "pids": pids, "commands": commands}


def _listeners_privileged(scope: Scope, params: ListenersParams) -> tuple[Shape, ...]:
    return (fixed("ss", "-Hltnp", "sport", "=", f":{params.port}"),)


@collector(
    "listeners",
    params=ListenersParams,
    doc="who listens on a TCP port: `ss -Hltnp sport = :PORT` (root: other users' sockets), `ps`",
    facts={
        "count": "listening sockets on the port (IPv4 and IPv6 count apart)",
        "pids": "the owners' pids, each once (empty when ss may not see them)",
        "commands": "each owner's command line, in the order of `pids`",
    },
    service_manager="systemd",
    privileged=_listeners_privileged,
)
async def listeners(ctx: CollectContext, params: ListenersParams) -> CollectedEvidence:
    ss = await run_read(ctx, ["ss", "-Hltnp", "sport", "=", f":{params.port}"], sudo=True)
    if not ss.ok:
        return failed(failure("ss", ss), ss)
    sockets = parse_ss(ss.stdout)
    if not sockets.owners:
        return found(listener_facts(sockets, {}), ss)
    pids = ",".join(str(pid) for pid in sockets.owners)
    ps = await run_read(ctx, ["ps", "-ww", "-o", "pid=,args=", "-p", pids])
    if ps.error or ps.exit_status not in (0, 1):  # 1: none of them is alive any more
        return failed(failure("ps", ps), ss, ps)
    return found(listener_facts(sockets, parse_pid_args(ps.stdout)), ss, ps)
