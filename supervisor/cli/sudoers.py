"""`sudoers [--host H]`: the sudoers file the rules in force need (see
`supervisor.trust.sudoers`)."""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.common import CliError, load

NAME = "sudoers"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        NAME, help="print the sudoers file the rules in force need (least privilege)"
    )
    p.add_argument(
        "--host", metavar="H", action="append", help="only this host's commands (repeatable)"
    )


def main(args: argparse.Namespace) -> int:
    from supervisor.trust.load import in_force  # (loads asyncssh: not for `run`)
    from supervisor.trust.sudoers import render_sudoers

    config = load(args)
    found = in_force(config)
    hosts = args.host or sorted(config.hosts)
    unknown = [name for name in hosts if name not in config.hosts]
    if unknown:
        known = ", ".join(sorted(config.hosts)) or "none"
        raise CliError(f"unknown host {unknown[0]!r} (hosts: {known})")
    text = render_sudoers(
        config,
        found.needs,
        hosts=hosts,
        rules=len(found.playbook.rules),
        playbook=str(config.playbook.path),
    )
    print(text, end="")
    return 0
