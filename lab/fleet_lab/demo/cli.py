"""`fleet-supervisor demo [--loopback] [--lab FOLDER]`: a command of the runtime's CLI through the
entry point `demo` of the group `fleet_supervisor.commands` (see `fleet_lab.demo.command`). The demo
is imported only when the command runs, so that the other commands load none of the lab."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from supervisor.cli.common import CliError


def add_parser(sub: Any) -> None:
    """The `demo` command, on the CLI's subparsers."""
    p = sub.add_parser(
        "demo",
        help="watch the supervisor heal the four headline failures in the lab (root, Linux; "
        "else three faults on loopback servers)",
    )
    p.add_argument("--loopback", action="store_true", help="the loopback demo, even as root")
    p.add_argument(
        "--lab", type=Path, metavar="FOLDER", help="use this running lab (no boot, no teardown)"
    )


def main(args: argparse.Namespace) -> int:
    from fleet_lab.demo.command import main as demo
    from fleet_lab.lab import LabError

    if args.loopback and args.lab is not None:
        raise CliError("--loopback and --lab exclude each other: the loopback demo boots no lab")
    try:
        return demo(loopback=args.loopback, lab=args.lab)
    except LabError as exc:
        raise CliError(str(exc)) from None
