"""`rules draft` and `rules replay`: rules grown from the fleet's own incidents.

The store is a real SQLite file written as the daemon writes it: each diagnosis runs the real
matcher over the shipped playbook, its evidence runs and its verdict go through the daemon's
own record writers (`supervisor.repair.records`), the rest of the story (the unit event, the
attempt, its step, the escalation or the verification) as the drills store it. The facts are
those the lab's drills gathered (`systemctl show` as captured in tests/data, the journal as the
unit logged it). The commands run through the CLI's `main`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor.cli import main
from supervisor.config.loader import load_config
from supervisor.core.clock import utcnow
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.timefmt import iso
from supervisor.judge.machine import State, Trigger
from supervisor.playbook.draft import telling_line
from supervisor.playbook.evidence.base import (
    CollectedEvidence,
    Collector,
    CollectorParams,
    FactValue,
    Scope,
)
from supervisor.playbook.evidence.journal import parse_journal
from supervisor.playbook.evidence.systemd import parse_unit_status
from supervisor.playbook.history import find_record, rounds_of
from supervisor.playbook.loader import load_playbook
from supervisor.playbook.matching import match_rules
from supervisor.playbook.model import EvidenceItem
from supervisor.playbook.registries import collectors_or_default
from supervisor.playbook.results import DiagnosisResult, EvidenceRun
from supervisor.playbook.scopes import scopes_of
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry, TimelineRow
from supervisor.record.store.store import Store
from supervisor.record.timeline.base import Record
from supervisor.record.timeline.codec import decode
from supervisor.record.timeline.parts import ProbeSample
from supervisor.record.timeline.repair import (
    AttemptFinished,
    AttemptStarted,
    Escalation,
    StepRan,
    Verification,
)
from supervisor.record.timeline.repair import Diagnosis as DiagnosisRecord
from supervisor.record.timeline.repair import Evidence as EvidenceRecord
from supervisor.record.timeline.state import Transition
from supervisor.record.timeline.unit import UnitHeard
from supervisor.repair import records
from supervisor.tell.web.page.rules import Ending, RuleHistory, rule_histories, rule_rows
from tests.helpers import write_fleet

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "evidence"
DRILL = DATA.parent / "history" / "unknown-failure-drill.json"
WORKER = "vllm-ds4-worker.service@spark2"
HEAD = "vllm-ds4-head.service@spark1"
QWEN = "vllm-qwen.service@spark1"
#: what the lab's `unknown-failure` drill makes the head's start say (fleet_lab.drills.faults)
UNKNOWN_TEXT = "RuntimeError: lab preflight: the accelerator refused the context (code 0x5eed)"
CUDA_TEXT = (
    "(EngineCore_DP0 pid=412) ERROR 06-02 10:07:12 [core.py:708] RuntimeError: CUDA error: "
    "unspecified launch failure\n"
    "vllm-ds4-head.service: Main process exited, code=exited, status=1/FAILURE\n"
)
IDLE: dict[str, FactValue] = {
    "verdict": "idle",
    "reason": "idle: 0 running, 0 waiting",
    "running": 0.0,
    "waiting": 0.0,
    "tok_s": 0.0,
}


def _status(name: str, **changes: FactValue) -> dict[str, FactValue]:
    """`systemctl show` as captured on a real host, parsed by the real collector."""
    return {**parse_unit_status((DATA / name).read_text()), **changes}


HEALTHY = _status("systemctl-show-healthy.txt")


EMPTY = parse_journal("")
Facts = Mapping[str, Mapping[str, Mapping[str, FactValue]]]
"""scope -> evidence id -> facts, as a diagnosis gathered them"""


def _json(facts: Mapping[str, FactValue]) -> object:
    """Facts as a YAML or JSON file has them (lists for tuples)."""
    return json.loads(json.dumps(facts))


def _fleet(folder: Path) -> Path:
    """The drills' fleet: the DeepSeek pair (worker on spark2, head on spark1, in containers)
    and the single-node qwen (a launch script on spark1's host)."""
    shutil.copytree(ROOT / "playbooks", folder / "playbooks")
    shutil.copytree(ROOT / "runbooks", folder / "runbooks")
    container = {"container": "vllm_ds4"}
    return write_fleet(
        folder,
        {
            "ds4": {
                "kind": "openai",
                "url": "http://127.0.0.11:8000",
                "model": "ds4",
                "units": [
                    {
                        "host": "spark2",
                        "unit": "vllm-ds4-worker.service",
                        "known_good": "/workspace/vllm-worker.sh",
                        **container,
                    },
                    {
                        "host": "spark1",
                        "unit": "vllm-ds4-head.service",
                        "known_good": "/workspace/vllm-head.sh",
                        **container,
                    },
                ],
            },
            "qwen": {
                "kind": "openai",
                "url": "http://127.0.0.11:8001",
                "model": "qwen",
                "units": [
                    {
                        "host": "spark1",
                        "unit": "vllm-qwen.service",
                        "known_good": "/opt/vllm/vllm-qwen.sh",
                    }
                ],
            },
        },
        hosts={"spark1": {"address": "127.0.0.11"}, "spark2": {"address": "127.0.0.12"}},
    )


class History:
    """Incidents written into the fleet's real store, as the daemon writes them."""

    def __init__(self, config: Path) -> None:
        self.config = load_config(config)
        self.playbook = load_playbook(config.parent / "playbooks")
        assert self.playbook.errors == ()

    async def incident(
        self,
        endpoint: str,
        *,
        at: datetime,
        facts: Facts,
        event: UnitHeard | None = None,
        after: Sequence[Record] = (),
    ) -> tuple[int, datetime]:
        """One incident: down on a refused probe, the unit event, a diagnosis over `facts`
        (scope -> evidence id -> facts), then `after`, then back to healthy (healed, or a
        person's fix). Returns its id and the diagnosis time."""
        probe = ProbeResult(
            endpoint=endpoint,
            tier=Tier.LIVENESS,
            check="models",
            outcome=ProbeOutcome.FAIL,
            reason="connection refused",
            at=at,
            latency_s=0.002,
        )
        sample = ProbeSample(
            at=at, tier="liveness", check="models", outcome="fail", reason=probe.reason
        )
        async with await Store.open(self.config.store.path) as store:
            down = Transition(
                source=State.HEALTHY,
                dest=State.DOWN,
                trigger=Trigger.DOWN,
                note="connection refused (unit died)",
                probe=sample,
                probes=(sample,),
            )
            incident = await store.transition(
                snapshot=_snapshot(endpoint, "down", at),
                entry=TimelineEntry(at=at, subject=endpoint, record=down),
                open_cause="connection refused",
            )
            assert incident is not None
            if event is not None:
                await store.append(incident, TimelineEntry(at=at, subject=endpoint, record=event))
            diagnosed = at + timedelta(seconds=1)
            diagnosis = await self._diagnose(endpoint, probe, facts)
            for run in diagnosis.evidence:
                await store.append(incident, records.evidence_entry(run, endpoint, diagnosed))
            await store.append(incident, records.diagnosis_entry(diagnosis, endpoint, diagnosed))
            for index, record in enumerate(after, start=2):
                then = at + timedelta(seconds=index * 10)
                await store.append(
                    incident, TimelineEntry(at=then, subject=endpoint, record=record)
                )
            back = at + timedelta(seconds=len(after) * 10 + 20)
            up = Transition(
                source=State.DOWN, dest=State.HEALTHY, trigger=Trigger.PASS, note="passed"
            )
            await store.transition(
                snapshot=_snapshot(endpoint, "healthy", back),
                entry=TimelineEntry(at=back, subject=endpoint, record=up),
                close_resolution="completion passed",
            )
        return incident, diagnosed

    async def _diagnose(
        self,
        name: str,
        trigger: ProbeResult,
        facts: Facts,
    ) -> DiagnosisResult:
        """The real matcher over the shipped playbook; each collector run once per (collector,
        unit, params) and recorded, as the daemon's diagnosis does."""
        endpoint = self.config.endpoints[name]
        runs: list[EvidenceRun] = []
        cache: dict[tuple[str, str | None, str], CollectedEvidence] = {}

        async def gather(
            item: EvidenceItem, collector: Collector[Any], scope: Scope, params: CollectorParams
        ) -> CollectedEvidence:
            where = scope.label if collector.needs_host else None
            key = (collector.name, where, params.model_dump_json())
            if key not in cache:
                given = facts.get(scope.label, {}).get(item.id)
                cache[key] = (
                    CollectedEvidence(collector=collector.name, facts=given)
                    if given is not None
                    else CollectedEvidence(collector=collector.name, error="no such file")
                )
                runs.append(
                    EvidenceRun(
                        evidence_id=item.id,
                        collector=collector.name,
                        scope=scope.label,
                        host=scope.host.name if scope.host else None,
                        params=params.model_dump(mode="json"),
                        evidence=cache[key],
                    )
                )
            return cache[key]

        matched, evaluations = await match_rules(
            self.playbook.rules,
            scopes_of(endpoint, self.config),
            state="down",
            trigger=trigger,
            collectors=collectors_or_default(None),
            gather=gather,
        )
        return DiagnosisResult(
            endpoint=name,
            state="down",
            matched=matched,
            evaluations=evaluations,
            evidence=tuple(runs),
        )


def _snapshot(name: str, state: str, at: datetime) -> Snapshot:
    return Snapshot(
        kind=SubjectKind.ENDPOINT,
        name=name,
        state=state,
        since=at,
        updated_at=at,
        last_reason="connection refused",
    )


def _escalated(rule: str, why: str) -> list[Record]:
    return [
        AttemptStarted(attempt=1, rule=rule),
        StepRan(index=0, action="restart_units", target="ds4", ok=False, result=why),
        AttemptFinished(attempt=1, rule=rule, outcome=f"failed: {why}"),
        Escalation(why=why, rule=rule, runbook=f"runbooks/{rule}.md"),
    ]


def _healed(rule: str) -> list[Record]:
    return [
        AttemptStarted(attempt=1, rule=rule),
        StepRan(index=0, action="restart_units", target="qwen", ok=True, result="restarted"),
        AttemptFinished(attempt=1, rule=rule, outcome="healed"),
        Verification(rule=rule, ok=True, within_s=20.0),
    ]


STEP_FAILED = (
    "step 1 (restart_units on ds4): systemctl start vllm-ds4-head.service on spark1 failed: "
    "exit 1: Job for vllm-ds4-head.service failed because the control process exited with "
    "error code."
)


async def _unknown_drill(
    history: History, at: datetime, *, looked_again: bool = False
) -> tuple[int, datetime, datetime]:
    """The lab's `unknown-failure` drill, as its store kept it (tests/data/history): the head's
    ExecStartPre exits 1 with a text no rule knows; unknown-failure restarts the pair once, the
    start fails again, a person is called. With `looked_again`, the escalated endpoint heard
    something new and diagnosed again on the same evidence (unknown-failure matched again), as
    it does when systemd's crash loop is heard after the escalation. Moved to open at `at`;
    closed after (the drill's reset). Returns its id, opening and first diagnosis times."""
    captured = json.loads(DRILL.read_text())
    shift = at - datetime.fromisoformat(captured["incident"]["opened_at"])
    entries = [
        TimelineEntry(
            at=datetime.fromisoformat(e["at"]) + shift,
            subject=e["subject"],
            record=decode(e["type"], e["version"], e["data"], kind=e["kind"], text=e["summary"]),
        )
        for e in captured["timeline"]
    ]
    [diagnosed] = [e.at for e in entries if isinstance(e.record, DiagnosisRecord)]
    if looked_again:
        again = timedelta(seconds=30)
        entries += [
            replace(e, at=e.at + again)
            for e in entries
            if isinstance(e.record, (EvidenceRecord, DiagnosisRecord))
        ]
    async with await Store.open(history.config.store.path) as store:
        incident = await store.transition(
            snapshot=_snapshot("ds4", "down", at),
            entry=entries[0],
            open_cause=captured["incident"]["symptom"],
        )
        assert incident is not None
        for entry in entries[1:]:
            await store.append(incident, entry)
        back = entries[-1].at + timedelta(minutes=1)
        up = Transition(
            source=State.ESCALATED, dest=State.HEALTHY, trigger=Trigger.PASS, note="passed"
        )
        await store.transition(
            snapshot=_snapshot("ds4", "healthy", back),
            entry=TimelineEntry(at=back, subject="ds4", record=up),
            close_resolution="completion passed",
        )
    return incident, at, diagnosed


async def _cuda_crash(history: History, at: datetime) -> tuple[int, datetime]:
    """Another fault no rule knows on the same pair: the head crash-loops on a CUDA error."""
    crashing = _status(
        "systemctl-show-healthy.txt",
        active_state="activating",
        sub_state="auto-restart",
        result="exit-code",
        exec_main_status=1,
        exec_main_code=1,
        n_restarts=4,
    )
    facts: Facts = {
        WORKER: {"status": HEALTHY, "progress": IDLE},
        HEAD: {"status": crashing, "journal": parse_journal(CUDA_TEXT)},
    }
    return await history.incident(
        "ds4", at=at, facts=facts, after=_escalated("unknown-failure", STEP_FAILED)
    )


async def _host_ghost(history: History, at: datetime) -> tuple[int, datetime]:
    """The lab's `ghost-execstart-host` drill: qwen's ExecStart runs a script that is gone."""
    ghost = _status(
        "systemctl-show-ghost-127.txt",
        exec_start="{ path=/bin/bash ; argv[]=/bin/bash /opt/vllm/vllm-qwen-090.sh }",
        exec_start_argv="/bin/bash /opt/vllm/vllm-qwen-090.sh",
        exec_start_path="/bin/bash",
        exec_start_script="/opt/vllm/vllm-qwen-090.sh",
        exec_start_container="",
        fragment_path="/etc/systemd/system/vllm-qwen.service",
    )
    facts: Facts = {
        QWEN: {
            "status": ghost,
            "script": {"exists": False},
            "binary": {"exists": True},
            "good": {"exists": True},
            "progress": IDLE,
        }
    }
    return await history.incident("qwen", at=at, facts=facts, after=_healed("ghost-execstart-host"))


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    return _fleet(tmp_path)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _history(fleet: Path) -> tuple[History, datetime]:
    return History(fleet), utcnow().replace(microsecond=0) - timedelta(hours=3)


def test_the_playbook_in_force_replays_to_the_decisions_it_took(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history, t0 = _history(fleet)

    async def build() -> None:
        await _unknown_drill(history, t0 - timedelta(hours=1))
        await _host_ghost(history, t0 + timedelta(hours=1))
        await _cuda_crash(history, t0 + timedelta(hours=2))

    asyncio.run(build())
    code, out, err = _run(capsys, "--config", str(fleet), "rules", "replay")
    assert (code, err) == (0, "")
    assert out == (
        "replayed 3 diagnoses of 3 incidents of the last 30d against "
        f"{fleet.parent / 'playbooks'}: no decision differs\n"
    )


def _three(fleet: Path) -> tuple[datetime, datetime]:
    """Returns when the drill's incident opened and when it was diagnosed."""
    """The drill's incident (#1), qwen's healed ghost (#2), another unknown fault (#3)."""
    history, t0 = _history(fleet)

    async def build() -> tuple[datetime, datetime]:
        _, opened, diagnosed = await _unknown_drill(history, t0 - timedelta(hours=1))
        await _host_ghost(history, t0 + timedelta(hours=1))
        await _cuda_crash(history, t0 + timedelta(hours=2))
        return opened, diagnosed

    return asyncio.run(build())


def test_a_rule_drafted_from_the_unknown_drill_matches_that_incident_and_no_other(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opened, diagnosed = _three(fleet)
    folder = fleet.parent / "playbooks"
    config = ("--config", str(fleet))
    rule = folder / "ds4-incident-1.yaml"
    fixture = folder / "tests" / "ds4-incident-1.yaml"
    runbook = fleet.parent / "runbooks" / "ds4-incident-1.md"

    code, out, err = _run(capsys, *config, "rules", "draft", "1")
    assert (code, err) == (0, "")
    assert out == (
        "drafted ds4-incident-1 from incident #1 (ds4 down, when unknown-failure matched): "
        f"3 conditions on {HEAD}, mode confirm\n"
        f"wrote {rule}\nwrote {fixture}\nwrote {runbook}\n"
        f"next: fleet-supervisor rules test {fixture} --playbook {folder}\n"
        f"      fleet-supervisor rules replay --playbook {folder}\n"
    )
    assert rule.read_text() == (
        "# Drafted by `fleet-supervisor rules draft 1` from incident #1 "
        f"(ds4, opened {iso(opened)}),\n"
        f"# its diagnosis of {iso(diagnosed)}, when unknown-failure matched.\n"
        "# when: the facts that singled that incident out. Edit them to say what the fault is,\n"
        "#   not only how it looked once: `rules test` runs its fixture (tests/), `rules replay`\n"
        "#   the fleet's history.\n"
        "# priority: just above unknown-failure, the rule that matched then.\n"
        "# actions: the steps of unknown-failure: make them the repair.\n"
        "# mode: confirm, a person is asked before each repair.\n"
        "id: ds4-incident-1\n"
        f"title: 'ds4: {UNKNOWN_TEXT}'\n"
        "severity: warning\n"
        "applies_to:\n"
        "  endpoints: [ds4]\n"
        "  states: [down]\n"
        "priority: -99\n"
        "evidence:\n"
        "- {id: status, collect: unit_status}\n"
        "- id: journal\n"
        "  collect: journal\n"
        "  params: {lines: 300}\n"
        "- {id: progress, collect: progress}\n"
        "when:\n"
        "  all:\n"
        "  - not: {fact: progress.verdict, op: eq, value: busy}\n"
        "  - {fact: status.result, op: eq, value: exit-code}\n"
        f"  - {{fact: journal.text, op: contains, value: '{UNKNOWN_TEXT}'}}\n"
        "actions:\n"
        "- {action: restart_units}\n"
        "mode: confirm\n"
        "runbook: runbooks/ds4-incident-1.md\n"
    )
    # the fixture gives every unit's facts as they were gathered, and expects the new rule
    written = yaml.safe_load(fixture.read_text())
    [case] = written["cases"]
    assert list(written) == ["cases"]
    assert case["name"] == f"incident #1: ds4 down ({iso(diagnosed)})"
    assert case["endpoint"] == {
        "name": "ds4",
        "kind": "openai",
        "state": "down",
        "url": "http://127.0.0.11:8000",
    }
    assert case["probe"] == {"check": "health", "outcome": "fail", "reason": "connection refused"}
    assert [u["unit"] for u in case["units"]] == [
        "vllm-ds4-worker.service",
        "vllm-ds4-head.service",
    ]
    assert case["hosts"] == {
        "spark2": {"address": "127.0.0.12"},
        "spark1": {"address": "127.0.0.11"},
    }
    assert case["facts"] == [_gathered(WORKER), _gathered(HEAD)]
    assert case["facts"][1]["status"]["result"] == "exit-code"
    assert UNKNOWN_TEXT in case["facts"][1]["journal"]["text"].splitlines()
    assert case["expect"] == "ds4-incident-1"
    assert runbook.read_text().startswith(
        f"# ds4-incident-1: ds4: {UNKNOWN_TEXT}\n\n"
        f"Drafted from incident #1 (ds4, opened {iso(opened)}).\n"
    )

    code, out, err = _run(capsys, *config, "rules", "test", str(fixture), "--playbook", str(folder))
    assert (code, out, err) == (
        0,
        f"ok  incident #1: ds4 down ({iso(diagnosed)}) -> ds4-incident-1\n1 passed, 0 failed\n",
        "",
    )
    # and on the fleet's history: it takes the drill's incident from unknown-failure, and no
    # other (not qwen's ghost, not the pair's CUDA crash that unknown-failure also matched)
    code, out, err = _run(capsys, *config, "rules", "replay", "--playbook", str(folder))
    assert (code, err) == (1, "")
    assert out == (
        "#1 ds4 (down): unknown-failure -> ds4-incident-1\n"
        "ds4-incident-1: now matches #1\n"
        "unknown-failure: no longer matches #1\n"
        f"replayed 3 diagnoses of 3 incidents of the last 30d against {folder}: 1 differs\n"
    )


def _gathered(scope: str) -> dict[str, Any]:
    """What the drill's diagnosis gathered in `scope`: each run that gave facts, by evidence
    id, and the endpoint's progress (read once, over HTTP)."""
    runs = [e["data"] for e in json.loads(DRILL.read_text())["timeline"] if e["type"] == "evidence"]
    return {
        run["evidence_id"]: run["facts"]
        for run in runs
        if (run["scope"] == scope or run["collector"] == "progress") and not run.get("error")
    }


def test_a_rule_drafted_outside_the_playbook_names_its_rule_file(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _three(fleet)
    out_dir = fleet.parent / "drafts"
    code, out, err = _run(
        capsys,
        "--config",
        str(fleet),
        "rules",
        "draft",
        "3",
        "--id",
        "cuda-launch-failure",
        "--out",
        str(out_dir),
    )
    assert (code, err) == (0, "")
    fixture = out_dir / "tests" / "cuda-launch-failure.yaml"
    written = yaml.safe_load(fixture.read_text())
    assert written["rule_files"] == ["../cuda-launch-failure.yaml"]
    # only the facts the rule gathers: the fixture runs against that rule alone
    assert [sorted(unit) for unit in written["cases"][0]["facts"]] == [
        ["progress", "status"],
        ["journal", "progress", "status"],
    ]
    assert (
        "  - {fact: journal.text, op: contains, "
        "value: 'RuntimeError: CUDA error: unspecified launch failure'}\n"
        in (out_dir / "cuda-launch-failure.yaml").read_text()
    )
    code, out, err = _run(capsys, "rules", "test", str(fixture), "--playbook", str(out_dir))
    assert (code, err) == (0, "")
    assert out.endswith("1 passed, 0 failed\n")


def test_a_changed_playbook_replays_to_what_it_would_no_longer_match(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _three(fleet)
    folder = fleet.parent / "playbooks"
    (folder / "unknown-failure.yaml").unlink()
    code, out, err = _run(capsys, "--config", str(fleet), "rules", "replay")
    assert (code, err) == (1, "")
    assert out == (
        "#1 ds4 (down): unknown-failure -> none\n"
        "#3 ds4 (down): unknown-failure -> none\n"
        "unknown-failure: no longer matches #1, #3\n"
        f"replayed 3 diagnoses of 3 incidents of the last 30d against {folder}: 2 differ\n"
    )
    code, out, err = _run(
        capsys, "--config", str(fleet), "rules", "replay", "--since", "90m", "--json"
    )
    assert (code, err) == (1, "")
    document = json.loads(out)
    assert document["incidents"] == 1
    assert document["diagnoses"] == 1
    [difference] = document["differences"]
    assert difference == {
        "incident": 3,
        "endpoint": "ds4",
        "state": "down",
        "at": difference["at"],
        "decided": "unknown-failure",
        "now": None,
        "not_gathered": [],
    }
    assert document["rules"] == [
        {"rule": "unknown-failure", "now_matches": [], "no_longer_matches": [3]}
    ]
    assert document["skipped"] == []
    assert document["problems"] == []


def test_an_incident_diagnosed_again_alike_is_one_line_of_the_replay_counted(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history, t0 = _history(fleet)
    asyncio.run(_unknown_drill(history, t0, looked_again=True))
    folder = fleet.parent / "playbooks"
    (folder / "unknown-failure.yaml").unlink()
    code, out, err = _run(capsys, "--config", str(fleet), "rules", "replay")
    assert (code, err) == (1, "")
    assert out == (
        "#1 ds4 (down): unknown-failure -> none (2 diagnoses)\n"
        "unknown-failure: no longer matches #1\n"
        f"replayed 2 diagnoses of 1 incident of the last 30d against {folder}: 2 differ\n"
    )


def test_draft_and_replay_say_in_one_line_what_they_cannot_do(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _three(fleet)
    folder = fleet.parent / "playbooks"
    config = ("--config", str(fleet))
    history, _ = _history(fleet)

    async def came_back_by_itself() -> int:
        """An incident with no diagnosis: the endpoint passed again before one ran."""
        at = utcnow().replace(microsecond=0) - timedelta(minutes=5)
        async with await Store.open(history.config.store.path) as store:
            down = Transition(
                source=State.HEALTHY, dest=State.DOWN, trigger=Trigger.DOWN, note="refused"
            )
            incident = await store.transition(
                snapshot=_snapshot("qwen", "down", at),
                entry=TimelineEntry(at=at, subject="qwen", record=down),
                open_cause="connection refused",
            )
            assert incident is not None
            return incident

    bare = asyncio.run(came_back_by_itself())
    cases = {
        ("9",): "fleet-supervisor: no incident #9\n",
        (str(bare),): f"fleet-supervisor: incident #{bare} has no stored evidence (no diagnosis "
        "gathered any): nothing to draft a rule from\n",
        ("1", "--id", "unknown-failure"): "fleet-supervisor: rule 'unknown-failure' already "
        f"exists ({folder / 'unknown-failure.yaml'}): choose another --id\n",
        ("1", "--id", "Lab_Preflight"): "fleet-supervisor: invalid rule id 'Lab_Preflight' (use "
        "lowercase letters, digits and '-', starting with either)\n",
    }
    for argv, error in cases.items():
        assert _run(capsys, *config, "rules", "draft", *argv) == (2, "", error), argv
    assert _run(capsys, *config, "rules", "draft", "1")[0] == 0
    again = _run(capsys, *config, "rules", "draft", "1")
    assert again == (
        2,
        "",
        "fleet-supervisor: rule 'ds4-incident-1' already exists "
        f"({folder / 'ds4-incident-1.yaml'}): choose another --id\n",
    )
    missing = fleet.parent / "nowhere.yaml"
    code, out, err = _run(capsys, "--config", str(missing), "rules", "replay")
    assert (code, out) == (2, "")
    assert err.startswith(f"{missing}: ")


def test_the_rules_page_counts_how_each_rules_incidents_ended(fleet: Path) -> None:
    t0, _ = _three(fleet)
    history, _ = _history(fleet)

    async def read() -> dict[str, RuleHistory]:
        async with await Store.open(history.config.store.path) as store:
            return await rule_histories(store, since=t0 - timedelta(minutes=1))

    histories = asyncio.run(read())
    assert sorted(histories) == ["ghost-execstart-host", "unknown-failure"]
    unknown, ghost = histories["unknown-failure"], histories["ghost-execstart-host"]
    assert unknown.summary == "2 incidents: 2 escalated"
    assert [(m.incident_id, m.endpoint, m.ending) for m in unknown.matches] == [
        (3, "ds4", Ending.ESCALATED),
        (1, "ds4", Ending.ESCALATED),
    ]
    # opened at t0+1h, verified 50 s later (after the attempt's steps)
    assert ghost.summary == "1 incident: 1 healed; median 50s to heal"
    assert [(m.incident_id, m.heal_s) for m in ghost.matches] == [(2, 50.0)]
    rows = {row.id: row for row in rule_rows(history.playbook, histories)}
    assert rows["unknown-failure"].matches == unknown.matches
    assert rows["hung-engine"].matches == ()


WEIGHTS = """\
id: weights-missing
title: the model's weights are gone
severity: critical
applies_to: {endpoints: [qwen], states: [down]}
priority: 100
evidence:
  - {id: weights, collect: path_exists, params: {path: /models/qwen/config.json}}
when:
  not: {fact: weights.exists, op: eq, value: true}
mode: manual
"""


def test_a_replayed_rule_that_asks_for_evidence_never_gathered_says_so(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runs are kept with their params: a path the diagnosis never looked at is missing,
    not answered by another path's run of the same collector."""
    _three(fleet)
    folder = fleet.parent / "playbooks"
    (folder / "weights-missing.yaml").write_text(WEIGHTS)
    code, out, err = _run(capsys, "--config", str(fleet), "rules", "replay")
    assert (code, err) == (1, "")
    assert out == (
        "#2 qwen (down): ghost-execstart-host -> weights-missing (not gathered then: weights)\n"
        "ghost-execstart-host: no longer matches #2\n"
        "weights-missing: now matches #2\n"
        f"replayed 3 diagnoses of 3 incidents of the last 30d against {folder}: 1 differs\n"
    )
    # the same evidence id as the ghost rules' script, another path: not their run's answer
    (folder / "weights-missing.yaml").write_text(
        WEIGHTS.replace("id: weights,", "id: script,").replace(
            "not: {fact: weights.exists, op: eq, value: true}",
            "{fact: script.exists, op: eq, value: false}",
        )
    )
    code, out, err = _run(capsys, "--config", str(fleet), "rules", "replay")
    assert (code, out, err) == (
        0,
        f"replayed 3 diagnoses of 3 incidents of the last 30d against {folder}: "
        "no decision differs\n",
        "",
    )


@pytest.mark.parametrize(
    ("log", "line"),
    [
        ("journal-ghost-127.txt", "bash: /workspace/vllm-head.sh: No such file or directory"),
        ("macos/mlx-kimi-port-taken.err.log", "OSError: [Errno 48] Address already in use"),
        (
            "macos/mlx-kimi-metal-oom.err.log",
            "libc++abi: terminating due to uncaught exception of type std::runtime_error: "
            "[METAL] Command buffer execution failed: Insufficient Memory "
            "(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
        ),
    ],
)
def test_a_drafted_condition_quotes_the_line_that_says_what_failed(log: str, line: str) -> None:
    """The last line that names a failure, not systemd's own account of the exit; a logger's
    prefix (pid, time, source) is left out, from the exception's name on."""
    assert telling_line((DATA / log).read_text()) == line
    assert telling_line(CUDA_TEXT) == "RuntimeError: CUDA error: unspecified launch failure"
    assert telling_line("Started vllm.service.\nINFO loading weights\n") is None


def test_a_rule_drafted_from_each_incident_takes_that_incident_alone(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _three(fleet)
    folder = fleet.parent / "playbooks"
    config = ("--config", str(fleet))
    for incident in ("1", "2", "3"):
        assert _run(capsys, *config, "rules", "draft", incident)[0] == 0
    fixtures = [str(folder / "tests" / f"{name}.yaml") for name in DRAFTED]
    code, out, err = _run(capsys, *config, "rules", "test", *fixtures)
    assert (code, err) == (0, "")
    assert out.endswith("3 passed, 0 failed\n")
    code, out, err = _run(capsys, *config, "rules", "replay")
    assert (code, err) == (1, "")
    assert out == (
        "#1 ds4 (down): unknown-failure -> ds4-incident-1\n"
        "#2 qwen (down): ghost-execstart-host -> qwen-incident-2\n"
        "#3 ds4 (down): unknown-failure -> ds4-incident-3\n"
        "ds4-incident-1: now matches #1\n"
        "ds4-incident-3: now matches #3\n"
        "ghost-execstart-host: no longer matches #2\n"
        "qwen-incident-2: now matches #2\n"
        "unknown-failure: no longer matches #1, #3\n"
        f"replayed 3 diagnoses of 3 incidents of the last 30d against {folder}: 3 differ\n"
    )
    # the healed ghost's draft starts from the steps that healed it
    assert (
        "actions:\n- action: write_execstart_dropin\n"
        in (folder / "qwen-incident-2.yaml").read_text()
    )


DRAFTED = ("ds4-incident-1", "qwen-incident-2", "ds4-incident-3")


def test_a_run_stored_before_params_were_kept_answers_its_own_evidence_id() -> None:
    collectors = collectors_or_default(None)
    path, status = collectors["path_exists"], collectors["unit_status"]
    older = [
        EvidenceRecord(evidence_id="script", collector="path_exists", scope=HEAD),
        EvidenceRecord(evidence_id="status", collector="unit_status", scope=HEAD),
        EvidenceRecord(evidence_id="progress", collector="progress", scope=WORKER),
    ]
    params = path.params.model_validate({"path": "/workspace/vllm-head.sh"})
    assert find_record(older, "script", path, HEAD, params) is older[0]
    assert find_record(older, "weights", path, HEAD, params) is None  # which path? unknown
    no_params = status.params()
    assert find_record(older, "st", status, HEAD, no_params) is older[1]  # it takes no params
    assert find_record(older, "st", status, WORKER, no_params) is None  # another unit's
    progress = collectors["progress"]
    # read once for the endpoint (over HTTP), under its first unit: it answers every unit
    assert find_record(older, "progress", progress, HEAD, progress.params()) is older[2]


@pytest.mark.parametrize(("judged", "heard"), [(True, True), (False, False)])
def test_a_death_the_worker_did_not_judge_is_no_rounds_event(judged: bool, heard: bool) -> None:
    """A unit event kept as evidence only (in maintenance, remediating) never led to the
    diagnosis: the round does not count it as what it heard (read from `judged`, not from the
    verdict's words)."""
    at = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
    death = UnitHeard(
        host="spark1",
        unit="vllm.service",
        event="failed",
        line="vllm.service failed: status=127",
        message="vllm.service: Failed with result 'exit-code'.",
        verdict="down: probe confirms: connection refused",
        judged=judged,
    )
    diagnosis = DiagnosisRecord(endpoint="ds4", state="down", rule="r")
    rows = [
        TimelineRow.of(record, id=n, incident_id=7, at=at, subject="ds4")
        for n, record in enumerate((death, diagnosis), start=1)
    ]
    (round_,) = rounds_of(7, rows)
    assert (round_.event is not None) is heard
