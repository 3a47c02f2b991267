"""Every built-in collector, by name: `COLLECTORS`, gathered from the modules listed here.

A collector is declared with `@collector(...)` (see `supervisor.playbook.evidence.declare`) in one
of
`MODULES`; adding a module to the tuple adds its collectors. Nothing is registered by side
effect: tests that want other collectors build their own mapping with `collectors_of`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType
from typing import Any

from supervisor.playbook.evidence import (
    files,
    journal,
    launchd,
    macos,
    memory,
    metrics,
    network,
    processes,
    progress,
    systemd,
)
from supervisor.playbook.evidence.base import Collector

MODULES: tuple[ModuleType, ...] = (
    systemd,
    journal,
    memory,
    network,
    processes,
    files,
    metrics,
    progress,
    launchd,
    macos,
)


def collectors_of(modules: Iterable[ModuleType]) -> Mapping[str, Collector[Any]]:
    """The collectors defined at module level in `modules`, by name, in module order.
    Two collectors with one name is a programming error (`ValueError`)."""
    found: dict[str, Collector[Any]] = {}
    for module in modules:
        for value in vars(module).values():
            if not isinstance(value, Collector):
                continue
            other = found.get(value.name)
            if other is not None and other is not value:
                raise ValueError(f"two collectors are called {value.name!r}")
            found[value.name] = value
    return MappingProxyType(found)


COLLECTORS: Mapping[str, Collector[Any]] = collectors_of(MODULES)

__all__ = ["COLLECTORS", "MODULES", "collectors_of"]
