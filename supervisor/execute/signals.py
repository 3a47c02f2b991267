"""Signals as root go through one root-owned helper (`signal.sh`, installed by
`deploy/install.sh` as `HELPER`), never through `kill` on a pid the daemon picked: the helper
itself checks that the pid belongs to one of the units or containers named in its arguments, or
is a vLLM engine/worker of their user. The generated sudoers pins those arguments per host."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from supervisor.config import UnitRef
from supervisor.execute.shape import PID, Pattern, Shape

#: Where `deploy/install.sh` installs the helper on every host the supervisor repairs.
HELPER = "/usr/local/libexec/fleet-supervisor/signal"
#: The helper's text (package data), for install.sh and the lab.
SCRIPT = Path(__file__).with_name("signal.sh")
SIGNALS = Pattern(regex="(TERM|KILL)", example="TERM")


def scope_args(units: Iterable[UnitRef]) -> tuple[str, ...]:
    """`--unit=A --unit=B --container=C`: the units (in order) and their containers."""
    chosen = list(units)
    named = [f"--unit={unit.unit}" for unit in chosen]
    containers = dict.fromkeys(f"--container={u.container}" for u in chosen if u.container)
    return (*named, *containers)


def signal_argv(signal: str, pid: int, units: Iterable[UnitRef]) -> list[str]:
    return [HELPER, signal, str(pid), *scope_args(units)]


def signal_shape(units: Iterable[UnitRef]) -> Shape:
    return Shape(argv=(HELPER, SIGNALS, PID, *scope_args(units)))
