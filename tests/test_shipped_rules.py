"""The shipped playbook against its own `rules test` fixtures (`playbooks/tests/*.yaml`).

Each fixture file is named after one shipped rule and holds cases that must match it and
look-alikes that must not; every case runs through the real matcher against the whole shipped
playbook, so priorities and "the first match wins" are part of what is checked.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from supervisor.cli import main
from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint, Host
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.playbook.evidence.base import CollectedEvidence, Collector, CollectorParams, Scope
from supervisor.playbook.fixturefile import load_fixture
from supervisor.playbook.fixtures import FixtureReport, run_fixtures
from supervisor.playbook.loader import Playbook, load_playbook
from supervisor.playbook.matching import match_rules
from supervisor.playbook.model import EvidenceItem
from supervisor.playbook.registries import collectors_or_default
from supervisor.playbook.scopes import scopes_of
from supervisor.repair.rulefacts import ask_text

PLAYBOOK = Path(__file__).resolve().parent.parent / "playbooks"
FIXTURES = sorted(PLAYBOOK.joinpath("tests").glob("*.yaml"))


@pytest.fixture(scope="module")
def shipped() -> Playbook:
    playbook = load_playbook(PLAYBOOK)
    assert playbook.lines() == []
    return playbook


@pytest.fixture(scope="module")
def report(shipped: Playbook) -> FixtureReport:
    return run_fixtures(FIXTURES, shipped)


def failures(report: FixtureReport) -> list[str]:
    """The lines of every failing case (with the runner's explanation) and every problem."""
    lines = [line for result in report.results if not result.passed for line in result.lines()]
    return [*lines, *report.problems]


def test_there_is_a_fixture_file_per_shipped_rule(shipped: Playbook) -> None:
    assert shipped.rules
    assert sorted(path.stem for path in FIXTURES) == sorted(rule.id for rule in shipped.rules)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda path: path.stem)
def test_every_case_of_the_fixture_file_passes(path: Path, shipped: Playbook) -> None:
    report = run_fixtures([path], shipped)
    assert failures(report) == []
    assert report.results
    assert report.exit_code == 0


@pytest.mark.parametrize("path", FIXTURES, ids=lambda path: path.stem)
def test_each_file_has_a_match_and_a_look_alike(path: Path, report: FixtureReport) -> None:
    expected = [result.expected for result in report.results if result.file == str(path)]
    assert path.stem in expected, f"no case of {path.name} expects {path.stem}"
    assert any(rule != path.stem for rule in expected), f"{path.name} has no look-alike"


def test_every_shipped_rule_is_expected_by_some_case(
    shipped: Playbook, report: FixtureReport
) -> None:
    cases: defaultdict[str | None, int] = defaultdict(int)
    for result in report.results:
        cases[result.expected] += 1
    assert [rule.id for rule in shipped.rules if cases[rule.id] == 0] == []


def test_the_cli_runs_every_fixture_file(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["rules", "test", *map(str, FIXTURES), "--playbook", str(PLAYBOOK)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if not line.startswith("ok  ")] == [
        f"{len(lines) - 1} passed, 0 failed"
    ]


@pytest.mark.parametrize("number", [0, 1], ids=["no reasoning text", "enforce-eager"])
async def test_silent_degradation_of_a_pair_names_the_head(shipped: Playbook, number: int) -> None:
    """The rule matches the unit that serves (the head, last in restart order), so the person
    is shown the head's command line, not the worker's."""
    loaded = load_fixture(PLAYBOOK / "tests" / "silent-degradation.yaml")
    assert loaded.fixture is not None
    case, facts = loaded.fixture.cases[number], loaded.facts[number]
    endpoint = Endpoint(name="ds4", kind="openai", url=case.endpoint.url, units=case.units)
    hosts = {unit.host: Host(name=unit.host) for unit in case.units}
    config = FleetConfig(source=Path("fleet.yaml"), hosts=hosts, endpoints={"ds4": endpoint})
    assert case.probe is not None
    trigger = ProbeResult(
        endpoint="ds4", tier=Tier.DEEP, check="completion", outcome=ProbeOutcome.DEGRADED,
        reason=case.probe.reason, at=datetime(2026, 6, 2, tzinfo=UTC), latency_s=0.0,
    )  # fmt: skip

    async def gather(
        item: EvidenceItem, collector: Collector[Any], scope: Scope, params: CollectorParams
    ) -> CollectedEvidence:
        return CollectedEvidence(
            collector=collector.name, facts=facts[scope.index].get(item.id, {})
        )

    matched, _ = await match_rules(
        shipped.rules, scopes_of(endpoint, config), state="degraded", trigger=trigger,
        collectors=collectors_or_default(None), gather=gather,
    )  # fmt: skip
    assert matched is not None
    assert matched.rule.id == "silent-degradation"
    assert [unit.unit for unit in matched.units] == ["vllm-ds4-head.service"]
    message = ask_text(matched.rule, [(r.scope, r.facts) for r in matched.scopes])
    head_args = facts[1]["cmdline"]["args"]
    assert f"vllm-ds4-head.service on spark1 runs: {head_args}." in message
    assert "vllm-ds4-worker" not in message


async def test_silent_degradation_without_a_unit_fills_its_whole_message(
    shipped: Playbook,
) -> None:
    """Kimi (mlx_lm on a Mac) has no unit: its rule's message names the endpoint and leaves no
    placeholder for the person to puzzle over."""
    endpoint = Endpoint(name="kimi", kind="openai", url="http://192.168.1.10:8013")
    config = FleetConfig(source=Path("fleet.yaml"), hosts={}, endpoints={"kimi": endpoint})
    trigger = ProbeResult(
        endpoint="kimi", tier=Tier.DEEP, check="completion", outcome=ProbeOutcome.DEGRADED,
        reason="no reasoning text", at=datetime(2026, 6, 2, tzinfo=UTC), latency_s=0.0,
    )  # fmt: skip

    async def gather(
        item: EvidenceItem, collector: Collector[Any], scope: Scope, params: CollectorParams
    ) -> CollectedEvidence:
        return CollectedEvidence(
            collector=collector.name, facts={}
        )  # no host, no unit: nothing found

    matched, _ = await match_rules(
        shipped.rules, scopes_of(endpoint, config), state="degraded", trigger=trigger,
        collectors=collectors_or_default(None), gather=gather,
    )  # fmt: skip
    assert matched is not None
    assert matched.rule.id == "silent-degradation-no-unit"
    assert ask_text(matched.rule, [(r.scope, r.facts) for r in matched.scopes]) == (
        "kimi is degraded (no reasoning text) at http://192.168.1.10:8013. No unit is configured "
        "for it, so compare how it was launched with its known-good command (reasoning parser, "
        "MTP, --enforce-eager, quoted JSON flags)."
    )
