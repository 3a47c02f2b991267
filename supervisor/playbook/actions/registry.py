"""Every remediation action, by name: `ACTIONS["restart_units"]`.

Built once from an explicit tuple of modules (no class-level state for tests to mutate); tests
that need other actions pass their own mapping to the functions that take `actions=`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType, ModuleType
from typing import Any

from supervisor.playbook.actions import (
    docker,
    files,
    launchd,
    memory,
    people,
    processes,
    shell,
    units,
    waiting,
)
from supervisor.playbook.actions.base import Action

__all__ = ["ACTIONS", "MODULES", "build_registry"]

MODULES: tuple[ModuleType, ...] = (
    units,
    launchd,
    memory,
    processes,
    files,
    docker,
    waiting,
    people,
    shell,
)


def build_registry(modules: tuple[ModuleType, ...]) -> Mapping[str, Action[Any]]:
    """The `Action`s defined in `modules`, by name; a name used twice is a programming error."""
    found: dict[str, Action[Any]] = {}
    for module in modules:
        for value in vars(module).values():
            if not isinstance(value, Action) or found.get(value.name) is value:
                continue
            if value.name in found:
                raise ValueError(f"action {value.name!r} is defined twice")
            found[value.name] = value
    return MappingProxyType(dict(sorted(found.items())))


ACTIONS: Mapping[str, Action[Any]] = build_registry(MODULES)
