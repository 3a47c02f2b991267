"""`check`: validate the config and the playbook without running anything."""

from __future__ import annotations

import argparse
import os
import sys

from supervisor.config.errors import ConfigError
from supervisor.config.loader import load_config, resolve_config_path
from supervisor.playbook.loader import load_playbook


def main(args: argparse.Namespace) -> int:
    path = resolve_config_path(args.config, os.environ)
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"{path}: ok ({len(config.hosts)} hosts, {len(config.endpoints)} endpoints)")
    playbook = load_playbook(config.playbook.path)
    for line in playbook.lines():
        print(line, file=sys.stderr)
    if playbook.errors:
        disabled = len({p.file for p in playbook.errors})
        print(
            f"{config.playbook.path}: {disabled} rule file(s) disabled by the problems above",
            file=sys.stderr,
        )
        return 1
    print(f"{config.playbook.path}: ok ({len(playbook.rules)} rules)")
    return 0
