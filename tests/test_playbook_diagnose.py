"""Diagnosis against a tiny collector registry that runs real commands on this machine:
caching, per-unit matching, evidence errors, first match wins, and the recorded reasons."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from supervisor.config.supervised import UnitRef
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.execute.local import LocalExecutor
from supervisor.playbook.diagnose import diagnose
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    Collector,
    NoEvidenceParams,
)
from supervisor.playbook.loader import Playbook, load_playbook
from supervisor.playbook.results import DiagnosisResult
from tests.test_playbook_support import FileCollectors, action_registry, fleet

WORKER = UnitRef(host="spark2", unit="vllm-ds4-worker.service", container="vllm_ds4")
HEAD = UnitRef(host="spark1", unit="vllm-ds4-head.service", container="vllm_ds4")
TRIGGER = ProbeResult(
    endpoint="ds4",
    tier=Tier.DEEP,
    check="completion",
    outcome=ProbeOutcome.FAIL,
    reason="connection refused",
    at=datetime(2026, 5, 1, tzinfo=UTC),
    latency_s=0.01,
)


def rule(rule_id: str, when: str, *, priority: int = 0, evidence: str = "", extra: str = "") -> str:
    evidence = evidence or "  - {id: status, collect: unit_status}\n"
    return (
        f"id: {rule_id}\ntitle: {rule_id}\nseverity: critical\nmode: auto\n"
        f"priority: {priority}\nevidence:\n{evidence}when: {when}\n{extra}"
    )


GHOST = rule(
    "ghost-execstart",
    "{all: [{fact: status.exec_main_status, op: in, value: [127, 203]}, "
    "{fact: script.exists, op: eq, value: false}]}",
    priority=50,
    evidence="  - {id: status, collect: unit_status}\n"
    '  - {id: script, collect: path_exists, params: {path: "{status.exec_start_script}"}}\n',
)
RESTARTS = rule("restart-loop", "{fact: status.n_restarts, op: gt, value: 10}", priority=10)


class Lab:
    """Rule files and per-unit status files in `tmp_path`; diagnoses with a LocalExecutor."""

    def __init__(self, tmp_path: Path, http: HttpClient) -> None:
        self.tmp_path = tmp_path
        self.http = http
        self.files = FileCollectors(tmp_path / "hosts")
        self.collectors: dict[str, Collector[Any]] = self.files.collectors()

    def playbook(self, *rules: str) -> Playbook:
        folder = self.tmp_path / "playbooks"
        folder.mkdir(exist_ok=True)
        for index, text in enumerate(rules):
            (folder / f"{index}.yaml").write_text(text)
        playbook = load_playbook(folder, collectors=self.collectors, actions=action_registry())
        assert playbook.lines() == []
        return playbook

    async def diagnose(
        self,
        playbook: Playbook,
        units: list[UnitRef],
        *,
        state: str = "down",
        host: str | None = None,
        timeout: timedelta = timedelta(seconds=5),
    ) -> DiagnosisResult:
        endpoint, config = fleet(units, host=host)
        return await diagnose(
            endpoint,
            config=config,
            state=state,
            trigger=TRIGGER,
            playbook=playbook,
            executor=LocalExecutor(),
            http=self.http,
            timeout=timeout,
            collectors=self.collectors,
        )


@pytest.fixture
async def lab(tmp_path: Path) -> AsyncIterator[Lab]:
    async with HttpClient() as http:
        yield Lab(tmp_path, http)


async def test_only_the_failing_unit_of_a_pair_is_bound(lab: Lab) -> None:
    lab.files.write_status(
        "spark2", WORKER.unit, exec_main_status=203, exec_start_script="/no/such"
    )
    lab.files.write_status("spark1", HEAD.unit, exec_main_status=0, exec_start_script="/bin/sh")
    diagnosis = await lab.diagnose(lab.playbook(GHOST), [WORKER, HEAD])
    assert diagnosis.matched is not None
    assert diagnosis.matched.rule.id == "ghost-execstart"
    assert diagnosis.matched.units == (WORKER,)
    assert [host.name for host in diagnosis.matched.hosts] == ["spark2"]
    [scope] = diagnosis.matched.scopes
    assert scope.facts.values["status.exec_start_script"] == "/no/such"
    assert scope.facts.values["script.exists"] is False
    assert scope.facts.values["unit.index"] == 0
    head = diagnosis.evaluations[0].scopes[1]
    assert not head.matched
    assert head.failure == "status.exec_main_status = 0: in [127, 203]: no"
    assert diagnosis.lines() == [
        "ds4 (down): ghost-execstart matched on vllm-ds4-worker.service@spark2",
        "rule ghost-execstart: matched",
        "  vllm-ds4-worker.service@spark2: yes",
        "    all: yes",
        "      status.exec_main_status = 203: in [127, 203]: yes",
        "      script.exists = false: eq false: yes",
        "  vllm-ds4-head.service@spark1: no",
        "    all: no",
        "      status.exec_main_status = 0: in [127, 203]: no",
        "      script.exists = true: eq false: no",
    ]


async def test_a_collector_two_rules_use_runs_once_per_unit(lab: Lab) -> None:
    lab.files.write_status(
        "spark2", WORKER.unit, exec_main_status=1, n_restarts=3, exec_start_script="/"
    )
    lab.files.write_status(
        "spark1", HEAD.unit, exec_main_status=1, n_restarts=41, exec_start_script="/"
    )
    diagnosis = await lab.diagnose(lab.playbook(GHOST, RESTARTS), [WORKER, HEAD])
    assert diagnosis.matched is not None
    assert diagnosis.matched.rule.id == "restart-loop"
    assert diagnosis.matched.units == (HEAD,)
    assert [e.rule_id for e in diagnosis.evaluations] == ["ghost-execstart", "restart-loop"]
    assert lab.files.runs["unit_status", "vllm-ds4-worker.service@spark2"] == 1
    assert lab.files.runs["unit_status", "vllm-ds4-head.service@spark1"] == 1
    assert [(run.collector, run.scope) for run in diagnosis.evidence] == [
        ("unit_status", "vllm-ds4-worker.service@spark2"),
        ("path_exists", "vllm-ds4-worker.service@spark2"),
        ("unit_status", "vllm-ds4-head.service@spark1"),
        ("path_exists", "vllm-ds4-head.service@spark1"),
    ]
    status_file = lab.files.status_file("spark1", HEAD.unit)
    assert diagnosis.evidence[2].evidence.commands[0].command == f"cat {status_file}"


async def test_the_first_match_wins_and_later_rules_are_not_tried(lab: Lab) -> None:
    lab.files.write_status("spark1", HEAD.unit, exec_main_status=127, n_restarts=41)
    lower = rule(
        "zz-lower",
        "{fact: ports.count, op: eq, value: 0}",
        evidence="  - {id: ports, collect: listeners, params: {port: 29501}}\n",
    )
    diagnosis = await lab.diagnose(lab.playbook(lower, RESTARTS), [HEAD])
    assert diagnosis.matched is not None
    assert diagnosis.matched.rule.id == "restart-loop"
    assert [e.rule_id for e in diagnosis.evaluations] == ["restart-loop"]
    assert lab.files.runs["listeners", "vllm-ds4-head.service@spark1"] == 0


async def test_evidence_errors_are_recorded_and_the_rule_does_not_match(lab: Lab) -> None:
    diagnosis = await lab.diagnose(lab.playbook(GHOST), [HEAD])  # no status file at all
    assert diagnosis.matched is None
    [evaluation] = diagnosis.evaluations
    [scope] = evaluation.scopes
    missing = lab.files.status_file("spark1", HEAD.unit)
    cat_error = f"unit_status: cat failed: exit 1: cat: {missing}: No such file or directory"
    assert scope.evidence_errors == {
        "status": cat_error,
        "script": "path_exists: placeholder {status.exec_start_script}: "
        f"status.exec_start_script is missing ({cat_error})",
    }
    assert scope.failure == f"status.exec_main_status: missing ({cat_error}): in [127, 203]: no"
    assert [run.collector for run in diagnosis.evidence] == ["unit_status"]
    assert diagnosis.evidence[0].evidence.error.startswith("cat failed: exit 1")
    assert diagnosis.lines()[0] == "ds4 (down): no rule matched"


async def test_a_crashing_or_hanging_collector_is_an_error_not_an_exception(lab: Lab) -> None:
    async def hang(ctx: CollectContext, params: NoEvidenceParams) -> CollectedEvidence:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    lab.collectors["hangs"] = Collector(
        name="hangs", params=NoEvidenceParams, run=hang, doc="hangs", facts={"never": "never"}
    )
    crash = rule(
        "crash", "{fact: c.never, op: eq, value: 1}", evidence="  - {id: c, collect: crashes}\n"
    )
    hung = rule(
        "hung", "{fact: h.never, op: eq, value: 1}", evidence="  - {id: h, collect: hangs}\n"
    )
    diagnosis = await lab.diagnose(
        lab.playbook(crash, hung), [HEAD], timeout=timedelta(milliseconds=50)
    )
    assert diagnosis.matched is None
    errors = [evaluation.scopes[0].evidence_errors for evaluation in diagnosis.evaluations]
    assert errors == [
        {"c": "crashes: the collector failed: RuntimeError: a bug in the collector"},
        {"h": "hangs: the collector did not finish within 200ms"},
    ]


async def test_rules_that_do_not_apply_are_recorded_as_skipped(lab: Lab) -> None:
    lab.files.write_status("spark1", HEAD.unit, n_restarts=41)
    only_ollama = (
        RESTARTS.replace("id: restart-loop", "id: ollama-only") + "applies_to: {kinds: [ollama]}\n"
    )
    only_down = RESTARTS + "applies_to: {states: [down]}\n"
    diagnosis = await lab.diagnose(lab.playbook(only_ollama, only_down), [HEAD], state="degraded")
    assert diagnosis.matched is None
    assert [line for e in diagnosis.evaluations for line in e.lines()] == [
        "rule ollama-only: skipped (applies to kinds ollama, not openai)",
        "rule restart-loop: skipped (applies in states down, not degraded)",
    ]
    assert diagnosis.evidence == ()


async def test_an_endpoint_without_units_has_one_scope_with_built_in_facts(lab: Lab) -> None:
    by_name = rule(
        "by-name",
        "{all: [{fact: m.text, op: eq, value: 'ds4: connection refused'}, "
        "{fact: unit.count, op: eq, value: 0}, {fact: unit.name, op: exists, value: false}, "
        "{fact: host.local, op: eq, value: true}]}",
        evidence='  - {id: m, collect: endpoint_only, params: {pattern: "{probe.reason}"}}\n'
        "  - {id: status, collect: unit_status}\n",
    )
    diagnosis = await lab.diagnose(lab.playbook(by_name), [], host="forge")
    assert diagnosis.matched is not None
    [scope] = diagnosis.matched.scopes
    assert scope.scope.label == "ds4"
    assert diagnosis.matched.units == ()
    assert scope.facts.values["endpoint.state"] == "down"
    assert scope.facts.values["probe.outcome"] == "fail"
    assert scope.evidence_errors == {"status": "unit_status: no unit in this scope"}


async def test_a_collector_that_needs_a_host_gets_none_without_one(lab: Lab) -> None:
    needs_host = rule("needs-host", "{fact: status.result, op: exists, value: true}")
    diagnosis = await lab.diagnose(lab.playbook(needs_host), [])
    [scope] = diagnosis.evaluations[0].scopes
    assert scope.evidence_errors == {
        "status": "unit_status: no host to run it on (the endpoint has no units and no host)"
    }
    assert lab.files.runs["unit_status", "ds4"] == 0


async def test_the_cache_key_holds_the_filled_params(lab: Lab) -> None:
    lab.files.write_status("spark1", HEAD.unit, exec_start_script="/")
    two_paths = rule(
        "two-paths",
        "{fact: a.exists, op: eq, value: false}",
        evidence="  - {id: status, collect: unit_status}\n"
        '  - {id: a, collect: path_exists, params: {path: "{status.exec_start_script}"}}\n'
        "  - {id: b, collect: path_exists, params: {path: /}}\n"
        "  - {id: c, collect: path_exists, params: {path: /nonexistent-path}}\n",
    )
    diagnosis = await lab.diagnose(lab.playbook(two_paths), [HEAD])
    assert [(run.evidence_id, run.params) for run in diagnosis.evidence] == [
        ("status", {}),
        ("a", {"path": "/", "in_container": False}),
        ("c", {"path": "/nonexistent-path", "in_container": False}),
    ]
    facts = diagnosis.evaluations[0].scopes[0].facts.values
    assert (facts["a.exists"], facts["b.exists"], facts["c.exists"]) == (True, True, False)
