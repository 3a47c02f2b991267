"""The Mac rules' messages to a person, filled from their fixtures' first cases: every
placeholder resolves and the person reads how the job ended, its log and the memory picture."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint, Host
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.playbook.evidence.base import CollectedEvidence, Collector, CollectorParams, Scope
from supervisor.playbook.fixturefile import load_fixture
from supervisor.playbook.loader import load_playbook
from supervisor.playbook.matching import match_rules
from supervisor.playbook.model import EvidenceItem
from supervisor.playbook.registries import collectors_or_default
from supervisor.playbook.scopes import scopes_of
from supervisor.repair.rulefacts import ask_text

PLAYBOOK = Path(__file__).resolve().parent.parent / "playbooks"

KIMI_LOG_START = "2026-11-24 21:14:02,118 - INFO - Starting httpd at 0.0.0.0 on port 8013..."


async def message_of(rule_id: str) -> str:
    """The matched rule's message for the first case of the rule's fixture file."""
    loaded = load_fixture(PLAYBOOK / "tests" / f"{rule_id}.yaml")
    assert loaded.fixture is not None
    case, facts = loaded.fixture.cases[0], loaded.facts[0]
    name = case.endpoint.name
    endpoint = Endpoint(name=name, kind=case.endpoint.kind, url=case.endpoint.url, units=case.units)
    hosts = {unit.host: Host(name=unit.host, service_manager="launchd") for unit in case.units}
    config = FleetConfig(source=Path("fleet.yaml"), hosts=hosts, endpoints={name: endpoint})
    assert case.probe is not None
    trigger = ProbeResult(
        endpoint=name, tier=Tier.DEEP, check=case.probe.check, outcome=ProbeOutcome.FAIL,
        reason=case.probe.reason, at=datetime(2026, 11, 25, tzinfo=UTC), latency_s=0.0,
    )  # fmt: skip

    async def gather(
        item: EvidenceItem, collector: Collector[Any], scope: Scope, params: CollectorParams
    ) -> CollectedEvidence:
        return CollectedEvidence(
            collector=collector.name, facts=facts[scope.index].get(item.id, {})
        )

    matched, _ = await match_rules(
        load_playbook(PLAYBOOK).rules, scopes_of(endpoint, config), state=str(case.endpoint.state),
        trigger=trigger, collectors=collectors_or_default(None), gather=gather,
    )  # fmt: skip
    assert matched is not None
    assert matched.rule.id == rule_id
    return ask_text(matched.rule, [(r.scope, r.facts) for r in matched.scopes])


@pytest.mark.parametrize(
    ("rule_id", "message"),
    [
        (
            "mlx-metal-oom",
            "com.fleet.mlx-kimi on m3ultra ran out of Metal memory (signal Abort trap: 6; state "
            "not running). Memory now: 9% free, pressure critical, wired 445.0 GiB of 512.0 GiB, "
            "compressed 11.2 GiB. Not restarting it: free memory first (another model, a "
            "leftover process) or lower its context, then start it.",
        ),
        (
            "launchd-job-crashloop",
            "com.fleet.mlx-kimi on m3ultra keeps dying: 14 runs, the last ended with signal "
            "Segmentation fault: 11. Its log says: 2026-11-25 02:11:40,001 - INFO - Starting "
            "httpd at 0.0.0.0 on port 8013... | zsh: segmentation fault  "
            "python -m mlx_lm.server --port 8013. Run: /Users/milo/mlx/.venv/bin/python -m "
            "mlx_lm.server --port 8013",
        ),
        (
            "mlx-port-taken",
            "com.fleet.mlx-kimi on m3ultra cannot listen on its port (http://192.168.1.10:8013): "
            "the listeners lsof sees are pids [60112] of [jordan]: [ssh -N -L "
            "8013:localhost:8013 gpu-box]; its job is spawn scheduled (exit 1) and logged: "
            f"{KIMI_LOG_START} | self.server_bind() | OSError: [Errno 48] Address already in "
            "use. Stop what holds the port if it should not run, then start com.fleet.mlx-kimi.",
        ),
    ],
)
async def test_a_mac_rules_message_is_filled_whole(rule_id: str, message: str) -> None:
    assert await message_of(rule_id) == message
