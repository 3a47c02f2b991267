"""The root-owned helpers a service account runs through sudo instead of a free command: each
checks or fixes what it does itself, so the sudoers line that allows it cannot be bent.

- `signal.sh` (`SIGNAL`): a signal only to a process of the units and containers named in its
  arguments, or to a vLLM engine/worker of their user;
- `dropin.sh` (`DROPIN`): an ExecStart drop-in whose command is in its arguments (pinned by
  the sudoers line), never read from the account.

`deploy/install.sh --sudoers FILE` installs both under `/usr/local/libexec/fleet-supervisor/`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from supervisor.config.supervised import UnitRef
from supervisor.execute.shape import PID, Pattern, Shape, fixed

FOLDER = "/usr/local/libexec/fleet-supervisor"
SIGNAL = f"{FOLDER}/signal"
DROPIN = f"{FOLDER}/dropin"
#: the helpers' texts (package data), for install.sh and the lab: installed name -> source
SOURCES = {
    SIGNAL: Path(__file__).with_name("signal.sh"),
    DROPIN: Path(__file__).with_name("dropin.sh"),
}
SIGNALS = Pattern(regex="(TERM|KILL)", example="TERM")


def scope_args(units: Iterable[UnitRef]) -> tuple[str, ...]:
    """`--unit=A --unit=B --container=C`: the units (in order) and their containers."""
    chosen = list(units)
    named = [f"--unit={unit.unit}" for unit in chosen]
    containers = dict.fromkeys(f"--container={u.container}" for u in chosen if u.container)
    return (*named, *containers)


def signal_argv(signal: str, pid: int, units: Iterable[UnitRef]) -> list[str]:
    return [SIGNAL, signal, str(pid), *scope_args(units)]


def signal_shape(units: Iterable[UnitRef]) -> Shape:
    return Shape(argv=(SIGNAL, SIGNALS, PID, *scope_args(units)))


def dropin_argv(path: str, command: Iterable[str]) -> list[str]:
    return [DROPIN, path, "--", *command]


def dropin_shape(path: str, command: Iterable[str]) -> Shape:
    return fixed(*dropin_argv(path, command))
