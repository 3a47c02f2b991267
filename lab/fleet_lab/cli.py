"""`fleet-supervisor lab up|down|status|drill NAME`: the fleet lab on this machine (root, Linux).

`up` writes the lab (default folder `/var/lib/fleet-lab`: never under /tmp or the checkout) and
boots spark1 (127.0.0.11) and spark2 (127.0.0.12) with the fleet's units (the daemon logs in as
the unprivileged `fleet`, `--user root` as root); `down` stops them and
leaves nothing running; `status` shows each host and its units; `drill NAME` injects one
catalogue fault into the running lab, runs the daemon in-process and prints what it detected,
diagnosed, did and verified with the time to detect and to heal (or to escalate, for the drills
that must not act); exit 0 when the daemon did what the drill expects.

A command of the runtime's CLI through the entry point `lab` of the group
`fleet_supervisor.commands`; the lab itself is imported only when the command runs, so that the
other commands (the daemon's `run` first) load none of it.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from supervisor.cli.common import CliError

DEFAULT_FOLDER = Path("/var/lib/fleet-lab")


def add_parser(sub: Any) -> None:
    """The `lab` command and its subcommands, on the CLI's subparsers."""
    lab = sub.add_parser("lab", help="the fleet lab: simulated hosts with real systemd and sshd")
    lab.add_argument(
        "--folder", type=Path, default=DEFAULT_FOLDER, help=f"lab folder (default {DEFAULT_FOLDER})"
    )
    commands = lab.add_subparsers(dest="lab_command", metavar="SUBCOMMAND", required=True)
    up = commands.add_parser("up", help="write and boot the lab hosts")
    up.add_argument(
        "--user",
        choices=("fleet", "root"),
        default="fleet",
        help="who the daemon logs in as: the unprivileged account every host makes, with the "
        "sudoers each drill generates (default), or root",
    )
    commands.add_parser("down", help="stop every lab host")
    commands.add_parser("status", help="each lab host and its units")
    drill = commands.add_parser("drill", help="inject a fault and watch what the daemon does")
    drill.add_argument("name", help="a drill of the catalogue (an unknown name lists them)")


def _up(folder: Path, user: str) -> int:
    from fleet_lab import fleet
    from fleet_lab.lab import Lab

    if folder.exists() and any(Lab.load(folder).running().values()):
        raise CliError(f"the lab in {folder} is already up: run `fleet-supervisor lab down` first")
    lab = fleet.create(folder, user=user)
    lab.up()
    for name, host in lab.hosts.items():
        print(f"{name}: up at {host.address} (systemd pid {host.pid})")
    print(f"ssh -i {lab.client_key} -o UserKnownHostsFile={lab.known_hosts} {user}@ADDRESS")
    return 0


def _status(folder: Path) -> int:
    from fleet_lab import fleet
    from fleet_lab.lab import Lab

    lab = Lab.load(folder)
    units = fleet.units()
    for name, host in lab.hosts.items():
        if host.pid is None:
            print(f"{name}: down")
            continue
        print(f"{name}: up at {host.address} (systemd pid {host.pid})")
        for unit in ["lab-sshd.service", *units.get(name, {})]:
            print(f"  {unit}: {host.state(unit)}")
    return 0


def _drill(folder: Path, name: str) -> int:
    from fleet_lab.drills import faults
    from fleet_lab.drills import run as drills
    from fleet_lab.lab import Lab

    faults.get(name)  # an unknown drill is one plain line before anything runs
    lab = Lab.load(folder)
    if not all(lab.running().values()):
        raise CliError(f"the lab in {folder} is not up: run `fleet-supervisor lab up` first")
    report = asyncio.run(drills.run_drill(lab, name))
    print("\n".join(report.lines()))
    return 0 if report.passed else 1


def main(args: argparse.Namespace) -> int:
    from fleet_lab.lab import Lab, LabError, check_root

    try:
        check_root()
        folder: Path = args.folder.absolute()
        if args.lab_command == "up":
            return _up(folder, args.user)
        if args.lab_command == "down":
            Lab.load(folder).down()
            print(f"lab in {folder}: down")
            return 0
        if args.lab_command == "status":
            return _status(folder)
        return _drill(folder, args.name)
    except LabError as exc:
        raise CliError(str(exc)) from None
