"""Where a lab lives on the machine: its hosts' loopback addresses and its cgroup folder.

A lab is on one net, `FLEET_LAB_NET` (0 to 254, default 0): net 0 puts spark1 on 127.0.0.11,
spark2 on 127.0.0.12, m3ultra on 127.0.0.13 and the hosts' cgroups under `fleet-lab/`; net N puts
them on 127.0.N.11, .12, .13 and under `fleet-lab-N/`. Nothing else a lab holds is the machine's
(its mounts, PIDs, hostnames and IPC are in the hosts' own namespaces, its files in its folder),
so two labs on different nets run side by side; two on one net cannot.
"""

from __future__ import annotations

import os

#: The environment variable that chooses the net of the labs this process boots.
VARIABLE = "FLEET_LAB_NET"


def parse(text: str) -> int:
    """The net `text` names; `ValueError` with the one-line reason otherwise."""
    if not text.isdigit() or not 0 <= int(text) <= 254:
        raise ValueError(f"{VARIABLE} must be a number from 0 to 254, not {text!r}")
    return int(text)


def _from_environment() -> int:
    try:
        return parse(os.environ.get(VARIABLE, "0"))
    except ValueError as exc:
        raise SystemExit(f"fleet-lab: {exc}") from None


#: The net of this process's labs.
NET = _from_environment()


def address(last: int, net: int = NET) -> str:
    """The loopback address of the host numbered `last` on `net`: `127.0.{net}.{last}`."""
    return f"127.0.{net}.{last}"


def cgroup_name(net: int = NET) -> str:
    """The folder under the cgroup2 root that holds the hosts' cgroups of the labs on `net`."""
    return "fleet-lab" if net == 0 else f"fleet-lab-{net}"
