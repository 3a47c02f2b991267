"""The rules in force for a config, and what they need as root."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.config.models import FleetConfig
from supervisor.playbook.actions.registry import ACTIONS
from supervisor.playbook.evidence.registry import COLLECTORS
from supervisor.playbook.loader import Playbook, load_playbook
from supervisor.trust.needs import Needs, fleet_needs


@dataclass(frozen=True, kw_only=True)
class InForce:
    config: FleetConfig
    playbook: Playbook
    needs: Needs


def in_force(config: FleetConfig) -> InForce:
    playbook = load_playbook(config.playbook.path)
    needs = fleet_needs(config, playbook.rules, actions=ACTIONS, collectors=COLLECTORS)
    return InForce(config=config, playbook=playbook, needs=needs)
