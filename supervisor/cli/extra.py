"""Commands that other distributions add to `fleet-supervisor`, found through the entry-point
group `fleet_supervisor.commands`: each entry point is named after its command and loads an
object (a module will do) with `add_parser(subparsers)` and `main(args) -> int`.

The lab (`fleet-lab`, in `lab/` of the checkout) registers `demo` and `lab` this way; the runtime
never imports it. A command named in `ELSEWHERE` that no installed distribution provides still
parses, and says in one line where to get it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, distributions, entry_points
from typing import Any, Protocol, cast

from supervisor.cli.common import CliError

GROUP = "fleet_supervisor.commands"

#: Commands of distributions that may be missing: name -> (help, how to get it).
ELSEWHERE: Mapping[str, tuple[str, str]] = {
    "demo": (
        "the demo (needs the lab: fleet-lab)",
        "`demo` comes with the lab, which is not installed: `bash scripts/demo.sh` in a "
        "checkout sets it up (or `pip install -e ./lab`)",
    ),
    "lab": (
        "the fleet lab (needs the lab: fleet-lab)",
        "`lab` comes with the lab, which is not installed: `bash scripts/setup.sh` in a "
        "checkout sets it up (or `pip install -e ./lab`)",
    ),
}


class ExtraCommand(Protocol):
    def add_parser(self, sub: Any) -> None: ...

    def main(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True, kw_only=True)
class MissingCommand:
    """The stand-in for a command whose distribution is not installed."""

    name: str

    def add_parser(self, sub: Any) -> None:
        # whatever follows is the missing command's to parse: taken whole, options included
        parser = sub.add_parser(
            self.name, help=ELSEWHERE[self.name][0], prefix_chars="\0", add_help=False
        )
        parser.add_argument("rest", nargs="*")

    def main(self, args: argparse.Namespace) -> int:
        raise CliError(ELSEWHERE[self.name][1])


def discover(path: Sequence[str] | None = None) -> dict[str, ExtraCommand]:
    """The installed extra commands by name (`path`: look only there, not on sys.path)."""
    found: list[EntryPoint]
    if path is None:
        found = list(entry_points(group=GROUP))
    else:
        found = [
            ep
            for dist in distributions(path=list(path))
            for ep in dist.entry_points
            if ep.group == GROUP
        ]
    return {ep.name: cast(ExtraCommand, ep.load()) for ep in sorted(found, key=lambda ep: ep.name)}


def with_stand_ins(commands: Mapping[str, ExtraCommand]) -> dict[str, ExtraCommand]:
    """`commands`, plus a stand-in for each command of `ELSEWHERE` none of them provides."""
    missing: dict[str, ExtraCommand] = {name: MissingCommand(name=name) for name in ELSEWHERE}
    return missing | dict(commands)
