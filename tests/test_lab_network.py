"""A lab's net (`FLEET_LAB_NET`, `fleet_lab.network`): the loopback addresses of its hosts and the
cgroup folder of their groups, so that labs on two nets run side by side (the interrupted-demo
spec in tests/lab boots one beside the package's lab)."""

from __future__ import annotations

import os
import socket
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


# --- a network namespace of its own (`FLEET_LAB_NETNS=1`, `fleet_lab.netns`) ------------------

#: In its own namespace (as the lab's workers are): listen on 29501 like a lab's head, then say
#: what `ss` lists on 29501 there and whether the port the spec holds here answers there.
OWN = (
    "import socket, subprocess, sys; from fleet_lab import netns; netns.enter_own(); "
    "held = int(sys.argv[1]); s = socket.socket(); s.bind(('127.0.0.11', 29501)); s.listen(); "
    "ss = subprocess.run(['ss', '-Hltn', 'sport = :29501'], capture_output=True, text=True); "
    "print(' '.join(line.split()[3] for line in ss.stdout.splitlines())); "
    "print(socket.socket().connect_ex(('127.0.0.1', held)) != 0)"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: makes a network namespace")
def test_a_lab_worker_s_namespace_sees_no_other_lab_s_listener() -> None:
    """Two labs side by side: each sees its own 29501 only, and nothing of the machine's."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", OWN, str(port)], stdout=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        said = [run.communicate(timeout=30)[0].splitlines() for run in runs]
    assert said == [["127.0.0.11:29501", "True"]] * 2


def test_a_namespace_that_cannot_be_made_is_one_line() -> None:
    """As a user without the right, `unshare` fails, and says so in one line."""
    code = (
        "import os; from fleet_lab import netns\n"
        "os.setuid(65534) if os.geteuid() == 0 else None\n"
        "try:\n    netns.enter_own()\nexcept netns.NetnsError as exc:\n    print(exc)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert shown.stdout == (
        "FLEET_LAB_NETNS=1: cannot make a network namespace: Operation not permitted\n"
    )
