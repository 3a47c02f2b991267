"""`rules`: list the playbook's rules; `rules test FIXTURE...`: replay recorded facts;
`rules draft INCIDENT`: a rule and its fixture from a stored incident; `rules replay`: a playbook
on the stored evidence of past incidents (`supervisor.cli.history`).

The playbook folder is `--playbook DIR`, else the config's `playbook.path` (relative to the
config file's folder) when a config file is there, else `./playbooks`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from supervisor.cli import history
from supervisor.cli.common import add_config_option
from supervisor.cli.render import dump, table
from supervisor.config.loader import ENV_VAR, load_config, resolve_config_path
from supervisor.core.durations import DurationError, parse_duration
from supervisor.playbook.fixtures import run_fixtures
from supervisor.playbook.loader import Playbook, load_playbook
from supervisor.playbook.model import Rule
from supervisor.playbook.problems import Level, RuleProblem

DEFAULT_FOLDER = Path("playbooks")  #: without a config file


def add_parser(sub: Any) -> None:
    """The `rules` command and its `test` subcommand, on the CLI's subparsers."""
    rules = sub.add_parser("rules", help="list the playbook's rules (exit 1 if one is invalid)")
    rules.add_argument("--playbook", metavar="DIR", help=_PLAYBOOK_HELP)
    rules.add_argument("--json", action="store_true")
    commands = rules.add_subparsers(dest="rules_command", metavar="SUBCOMMAND")
    test = commands.add_parser("test", help="run rule test fixtures (exit 1 if a case fails)")
    test.add_argument("fixtures", nargs="+", metavar="FIXTURE")
    test.add_argument("--playbook", metavar="DIR", default=argparse.SUPPRESS, help=_PLAYBOOK_HELP)
    add_config_option(test, after_command=True)
    draft = commands.add_parser(
        "draft", help="write a rule, its fixture and a runbook stub from a stored incident"
    )
    draft.add_argument("incident", type=int, metavar="INCIDENT")
    draft.add_argument("--id", dest="rule_id", metavar="NEW_ID", help="the new rule's id")
    draft.add_argument(
        "--out", metavar="DIR", help="where the rule goes (default: the playbook folder)"
    )
    draft.add_argument("--playbook", metavar="DIR", default=argparse.SUPPRESS, help=_PLAYBOOK_HELP)
    add_config_option(draft, after_command=True)
    replay = commands.add_parser(
        "replay", help="a playbook on past incidents' evidence: where its decisions differ"
    )
    replay.add_argument(
        "--since", type=_duration, metavar="AGE", help="incidents of the last AGE (default 30d)"
    )
    replay.add_argument("--playbook", metavar="DIR", default=argparse.SUPPRESS, help=_PLAYBOOK_HELP)
    replay.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    add_config_option(replay, after_command=True)


def _duration(text: str) -> object:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_PLAYBOOK_HELP = "rule folder (default: the config's playbook.path, else ./playbooks)"


def main(args: argparse.Namespace) -> int:
    if args.rules_command == "draft":
        return history.main_draft(args, playbook_folder(args))
    if args.rules_command == "replay":
        return history.main_replay(args, playbook_folder(args))
    playbook = load_playbook(playbook_folder(args))
    if args.rules_command == "test":
        report = run_fixtures([Path(name) for name in args.fixtures], playbook)
        print("\n".join(report.lines()))
        return report.exit_code
    if args.json:
        print(_json(playbook))
    else:
        print(_text(playbook))
    return 1 if playbook.errors else 0


def playbook_folder(args: argparse.Namespace) -> Path:
    """`--playbook`, else the config's `playbook.path` (default: `playbooks` beside the config
    file) when there is a config file, else `./playbooks`."""
    if args.playbook:
        return Path(args.playbook)
    config_path = resolve_config_path(args.config, os.environ)
    chosen = args.config or os.environ.get(ENV_VAR)
    if not chosen and not config_path.exists():
        return DEFAULT_FOLDER
    config = load_config(config_path)  # a ConfigError ends the command (exit 2)
    return config.playbook.path


def _rows(playbook: Playbook) -> list[dict[str, Any]]:
    rows = [_rule_row(rule, playbook) for rule in playbook.rules]
    loaded = {rule.source for rule in playbook.rules}
    broken: dict[str, list[RuleProblem]] = {}
    for problem in playbook.errors:
        if problem.file not in loaded:
            broken.setdefault(problem.file, []).append(problem)
    for file, problems in broken.items():
        rule_id = next((p.rule_id for p in problems if p.rule_id), None)
        rows.append(
            {
                "id": rule_id or Path(file).name,
                "file": file,
                "status": "disabled",
                "problems": [str(problem) for problem in problems],
            }
        )
    return rows


def _rule_row(rule: Rule, playbook: Playbook) -> dict[str, Any]:
    problems = [p for p in playbook.problems if p.file == rule.source]
    warnings = [str(p) for p in problems if p.level is Level.WARNING]
    scope = rule.applies_to
    return {
        "id": rule.id,
        "file": rule.source,
        "title": rule.title,
        "mode": str(rule.mode),
        "severity": str(rule.severity),
        "priority": rule.priority,
        "applies_to": {
            "kinds": list(scope.kinds) if scope.kinds is not None else None,
            "endpoints": list(scope.endpoints) if scope.endpoints is not None else None,
            "states": [str(state) for state in scope.states],
        },
        "actions": [step.action for step in rule.actions],
        "status": "ok",
        "problems": warnings,
    }


def _applies(row: dict[str, Any]) -> str:
    scope = row["applies_to"]
    parts = [f"{key} {','.join(scope[key])}" for key in ("kinds", "endpoints") if scope[key]]
    parts.append(f"states {','.join(scope['states'])}")
    return "; ".join(parts)


def _status(row: dict[str, Any]) -> str:
    count = len(row["problems"])
    if row["status"] != "ok" or not count:
        return str(row["status"])
    return f"ok ({count} warning{'s' if count > 1 else ''})"


def _text(playbook: Playbook) -> str:
    rows = _rows(playbook)
    if not rows:
        return "\n".join([f"no rules in {playbook.folder}", *playbook.lines()])
    cells = [
        [
            row["id"],
            row.get("mode", "-"),
            row.get("severity", "-"),
            _applies(row) if "applies_to" in row else "-",
            ", ".join(row.get("actions", [])) or "-",
            _status(row),
        ]
        for row in rows
    ]
    lines = [table(["ID", "MODE", "SEVERITY", "APPLIES TO", "ACTIONS", "STATUS"], cells)]
    lines.extend(playbook.lines())
    return "\n".join(lines)


def _json(playbook: Playbook) -> str:
    folder = str(playbook.folder) if playbook.folder is not None else None
    document = {"playbook": folder, "rules": _rows(playbook), "problems": playbook.lines()}
    return dump(document)
