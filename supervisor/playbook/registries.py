"""The global collector and action registries, imported only when first needed.

Every engine function takes `collectors=` / `actions=` (tests pass small registries of their
own); None means these global ones, which are built by their own packages.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, cast

from supervisor.playbook.actions.base import Action
from supervisor.playbook.evidence.base import Collector

Collectors = Mapping[str, Collector[Any]]
Actions = Mapping[str, Action[Any]]


def collectors_or_default(collectors: Collectors | None) -> Collectors:
    if collectors is not None:
        return collectors
    module = importlib.import_module("supervisor.playbook.evidence.registry")
    return cast(Collectors, module.COLLECTORS)


def actions_or_default(actions: Actions | None) -> Actions:
    if actions is not None:
        return actions
    module = importlib.import_module("supervisor.playbook.actions.registry")
    return cast(Actions, module.ACTIONS)
