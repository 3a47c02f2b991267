"""`fleet-supervisor`: the command line. Exit codes: 0 all good, 1 the check found a problem
(a probe failed, the config or a rule is invalid), 2 it could not run (usage, no store, no such
endpoint or incident)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

from supervisor import __version__
from supervisor.cli import (
    check,
    control,
    diagnose,
    doctor,
    extra,
    incidents,
    notify,
    probe,
    report,
    rules,
    run,
    status,
    sudoers,
)
from supervisor.cli.common import CliError, add_config_option
from supervisor.config.errors import ConfigError
from supervisor.core.durations import DurationError, parse_duration
from supervisor.record.store.errors import StoreError

#: Before letting it act: `doctor`, `sudoers`, `report` (each module: add_parser, main).
TRUST: Mapping[str, extra.ExtraCommand] = {
    doctor.NAME: doctor,
    sudoers.NAME: sudoers,
    report.NAME: report,
}


def _duration(text: str) -> object:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser(commands: Mapping[str, extra.ExtraCommand]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleet-supervisor",
        description="Keeps a home/lab LLM inference fleet serving.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_config_option(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("check", help="validate the config; exit 1 with file:line: field errors")
    p = sub.add_parser("run", help="run the daemon until SIGTERM or Ctrl-C")
    p.add_argument("--log-format", choices=("auto", "json", "text"), default="auto")
    p.add_argument(
        "--dry-run", action="store_true", help="observe and record what it would do, change nothing"
    )
    p = sub.add_parser("status", help="every endpoint's state, from the store")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("probe", help="probe one endpoint now (liveness and the real check)")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("incidents", help="incidents from the store, newest first")
    p.add_argument("--endpoint", metavar="NAME", help="only this endpoint (or host)")
    p.add_argument(
        "--since",
        type=_duration,
        metavar="AGE",
        help="only those open or closed within AGE, e.g. 24h",
    )
    p.add_argument("--open", action="store_true", help="only open incidents")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser(
        "diagnose", help="gather evidence now: which rule matches, why, and the plan"
    )
    p.add_argument("name")
    p.add_argument("--dry-run", action="store_true", help="list the exact commands of the plan")
    p.add_argument(
        "--state", choices=("down", "degraded", "unreachable"), help="diagnose as if in this state"
    )
    p = sub.add_parser("timeline", help="one incident's timeline")
    p.add_argument("id", type=int)
    p.add_argument("--json", action="store_true")
    rules.add_parser(sub)
    control.add_parsers(sub)
    for module in TRUST.values():
        module.add_parser(sub)
    for command in commands.values():
        command.add_parser(sub)
    sub.add_parser("notify-test", help="send one Telegram message to every configured chat")
    for subparser in sub.choices.values():  # `check --config FILE` as well as before it
        if "-" in subparser.prefix_chars:  # (a stand-in takes every word as it comes)
            add_config_option(subparser, after_command=True)
    return parser


def parse_args(
    argv: Sequence[str] | None = None, *, commands: Mapping[str, extra.ExtraCommand] | None = None
) -> argparse.Namespace:
    """The command line as the commands see it (usage errors exit 2, as argparse does).
    `commands`: the extra commands (default: those installed, see `supervisor.cli.extra`)."""
    return _parser(_extra(commands)).parse_args(argv)


def _extra(commands: Mapping[str, extra.ExtraCommand] | None) -> Mapping[str, extra.ExtraCommand]:
    return extra.with_stand_ins(extra.discover() if commands is None else commands)


def main(
    argv: Sequence[str] | None = None, *, commands: Mapping[str, extra.ExtraCommand] | None = None
) -> int:
    """`commands`: the extra commands (default: those installed, see `supervisor.cli.extra`)."""
    found = _extra(commands)
    args = _parser(found).parse_args(argv)
    handlers = {
        **{name: command.main for name, command in found.items()},
        "check": check.main,
        "run": run.main,
        "status": status.main,
        "probe": probe.main,
        "incidents": incidents.main_list,
        "timeline": incidents.main_timeline,
        "diagnose": diagnose.main,
        "rules": rules.main,
        "notify-test": notify.main,
        **dict.fromkeys(control.COMMANDS, control.main),
        **{name: module.main for name, module in TRUST.items()},
    }
    try:
        return handlers[args.command](args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    except (StoreError, CliError) as exc:
        print(f"fleet-supervisor: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
