"""What the commands share: finding the config and opening the store read-side."""

from __future__ import annotations

import argparse
import os

from supervisor.config.keys import with_keys
from supervisor.config.loader import load_config, resolve_config_path
from supervisor.config.models import FleetConfig
from supervisor.record.store.store import Store
from supervisor.record.store.target import store_target


class CliError(Exception):
    """A plain message for stderr, exit code 2."""


def add_config_option(parser: argparse.ArgumentParser, *, after_command: bool = False) -> None:
    """`--config FILE`, before the command or (`after_command`) after it: given there, it wins
    over one before the command (its default leaves the one before in place)."""
    default = argparse.SUPPRESS if after_command else None
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=default,
        help="fleet config (default: $FLEET_SUPERVISOR_CONFIG, else ./fleet.yaml)",
    )


def load(args: argparse.Namespace, *, keys: bool = False) -> FleetConfig:
    """The config; `keys`: with the endpoints' API keys read (for a command that sends them)."""
    config = load_config(resolve_config_path(args.config, os.environ))
    return with_keys(config, os.environ) if keys else config


async def open_store(config: FleetConfig) -> Store:
    """The daemon's store, for reading beside it; a missing store is a plain error."""
    return await Store.open(store_target(config.store), create=False)
