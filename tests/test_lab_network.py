"""A lab's net (`FLEET_LAB_NET`, `fleet_lab.network`): the loopback addresses of its hosts and the
cgroup folder of their groups, so that labs on two nets run side by side (the interrupted-demo
spec in tests/lab boots one beside the package's lab)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fleet_lab import network

SHOW = (
    "from fleet_lab import boot, lab, procs; from fleet_lab.mac import host; "
    "print(dict(lab.ADDRESSES), dict(host.ADDRESSES), procs.CGROUP_ROOT.name); "
    "print(boot.stage1('spark1', '/var/lib/x/spark1').splitlines()[5])"
)


def _show(net: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != network.VARIABLE}
    if net is not None:
        env[network.VARIABLE] = net
    return subprocess.run(
        [sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, check=False
    )


def test_net_0_is_the_lab_s_usual_place() -> None:
    shown = _show(None)
    assert shown.stdout.splitlines() == [
        "{'spark1': '127.0.0.11', 'spark2': '127.0.0.12'} {'m3ultra': '127.0.0.13'} fleet-lab",
        'mkdir -p "$CG/fleet-lab/spark1"',
    ]


def test_net_n_moves_the_addresses_and_the_cgroups() -> None:
    shown = _show("7")
    assert shown.stdout.splitlines() == [
        "{'spark1': '127.0.7.11', 'spark2': '127.0.7.12'} {'m3ultra': '127.0.7.13'} fleet-lab-7",
        'mkdir -p "$CG/fleet-lab-7/spark1"',
    ]


@pytest.mark.parametrize("text", ["255", "-1", "x", ""])
def test_a_bad_net_is_refused_in_one_line(text: str) -> None:
    shown = _show(text)
    assert shown.returncode == 1
    assert shown.stdout == ""
    assert (
        shown.stderr == f"fleet-lab: FLEET_LAB_NET must be a number from 0 to 254, not {text!r}\n"
    )
