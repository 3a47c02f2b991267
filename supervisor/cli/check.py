"""`check`: validate the config (and, later, the playbook) without running anything."""

from __future__ import annotations

import argparse
import os
import sys

from supervisor.config import ConfigError, load_config, resolve_config_path


def main(args: argparse.Namespace) -> int:
    path = resolve_config_path(args.config, os.environ)
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"{path}: ok ({len(config.hosts)} hosts, {len(config.endpoints)} endpoints)")
    return 0
