"""A store written by the code before the typed timeline (schema 1, `tests/data/store_v1`) opens
with this code: migrated once, in place, its rows read back as typed records that render the
very summaries they were stored with, and it stays append-only."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from supervisor.cli import main
from supervisor.core.actor import Actor, Via
from supervisor.judge.machine import State, Trigger
from supervisor.record.store.records import SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.base import EntryKind, JSONValue
from supervisor.record.timeline.codec import decode
from supervisor.record.timeline.control import Acked, Legacy, Note, Notification
from supervisor.record.timeline.repair import (
    INTERRUPTED,
    AttemptFinished,
    Diagnosis,
    Escalation,
    Evidence,
    StepRan,
    Verification,
)
from supervisor.record.timeline.state import Probe, Transition
from supervisor.record.timeline.unit import UnitHeard
from tests.helpers import write_fleet

FIXTURE = Path(__file__).parent / "data" / "store_v1" / "supervisor.db"


def _old_rows(path: Path) -> list[tuple[int, str, str]]:
    raw = sqlite3.connect(path)
    try:
        return raw.execute("SELECT id, kind, summary FROM timeline ORDER BY id").fetchall()
    finally:
        raw.close()


def _user_version(path: Path) -> int:
    raw = sqlite3.connect(path)
    try:
        return int(raw.execute("PRAGMA user_version").fetchone()[0])
    finally:
        raw.close()


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    path = tmp_path / "state" / "supervisor.db"
    path.parent.mkdir()
    shutil.copy(FIXTURE, path)
    return path


async def test_an_old_store_reads_as_typed_records(old_store: Path) -> None:
    before = _old_rows(old_store)
    assert _user_version(old_store) == 1
    async with await Store.open(old_store, create=False) as store:
        endpoint, host = sorted(await store.incidents(), key=lambda i: i.subject_kind)
        rows = await store.timeline(endpoint.id) + await store.timeline(host.id)
    assert _user_version(old_store) == 3  # 1 -> 2 (typed timeline) -> 3 (leadership)
    # every row typed, none left as an old sentence, each rendering what was stored
    after = [(r.id, r.kind.value, r.summary) for r in sorted(rows, key=lambda r: r.id)]
    # the one kind that changed: an interrupted attempt was a decision, it is an attempt now
    assert after == [(i, "attempt" if i == 17 else k, s) for i, k, s in before]
    assert not [r for r in rows if isinstance(r.record, Legacy | Note)]
    records = [r.record for r in rows]
    assert [type(r).__name__ for r in records] == [
        "Transition",
        "Evidence",
        "Diagnosis",
        "Transition",
        "StepRan",
        "Transition",
        "Probe",
        "Transition",
        "Verification",
        "Transition",
        "Evidence",
        "Diagnosis",
        "Escalation",
        "Transition",
        "Notification",
        "Acked",
        "AttemptFinished",
        "Transition",
        "Transition",
    ]
    moves = [r for r in records if isinstance(r, Transition)]
    assert [(t.source, t.dest, t.trigger, t.of_host) for t in moves] == [
        ("healthy", "down", "confirm_down", False),
        ("down", "remediating", "remediate", False),
        ("remediating", "verifying", "verify", False),
        ("verifying", "healthy", "pass_check", False),
        ("healthy", "down", "confirm_down", False),
        ("down", "escalated", "escalate", False),
        ("reachable", "unreachable", "host_lost", True),
        ("unreachable", "reachable", "host_back", True),
    ]
    opened = moves[0]
    assert opened.note == "connection refused (2 failures and a failed re-probe)"
    assert opened.probe is not None
    assert opened.probe.reason == "connection refused"
    assert opened.probes is not None
    assert len(opened.probes) == 3  # 2 failures and the re-probe
    assert [t.rule for t in moves[1:3]] == ["revive", "revive"]
    escalate = moves[5]
    assert (escalate.why, escalate.rule) == ("the server is not running", "revive")
    assert moves[6].failures == 3

    evidence = next(r for r in records if isinstance(r, Evidence))
    assert (evidence.evidence_id, evidence.collector, evidence.scope) == ("port", "listeners", "m")
    assert evidence.facts == {"commands": [], "count": 0, "pids": []}
    assert [c.exit_status for c in evidence.commands] == [0]
    diagnosis = next(r for r in records if isinstance(r, Diagnosis))
    assert (diagnosis.endpoint, diagnosis.state, diagnosis.rule, diagnosis.scopes) == (
        "m",
        "down",
        "revive",
        ("m",),
    )
    assert diagnosis.lines[0] == "rule revive: matched"
    step = next(r for r in records if isinstance(r, StepRan))
    assert (step.index, step.action, step.target, step.verdict) == (0, "shell", "forge", "ok")
    assert step.commands[0].command.startswith("touch ")
    probe = next(r for r in records if isinstance(r, Probe))
    assert (probe.sample.tier, probe.sample.check, probe.sample.http_status) == (
        "liveness",
        "models",
        200,
    )
    verification = next(r for r in records if isinstance(r, Verification))
    assert (verification.rule, verification.ok) == ("revive", True)
    escalation = next(r for r in records if isinstance(r, Escalation))
    assert (escalation.why, escalation.runbook, escalation.dry_run) == (
        "the server is not running",
        "runbooks/revive.md",
        False,
    )
    notification = next(r for r in records if isinstance(r, Notification))
    assert (notification.message, notification.chat_id) == ("opened", 42)
    assert next(r for r in records if isinstance(r, Acked)).who == "alice"
    interrupted = next(r for r in records if isinstance(r, AttemptFinished))
    assert (interrupted.attempt, interrupted.rule, interrupted.outcome) == (
        2,
        "revive",
        INTERRUPTED,
    )

    # the cause: the diagnosis found in the old timeline; the host's stays its symptom
    assert (endpoint.symptom, endpoint.diagnosis, endpoint.cause) == (
        "connection refused",
        "revive",
        "revive",
    )
    assert host.subject_kind is SubjectKind.HOST
    assert host.cause == host.symptom == "host spark1 does not answer: connection refused"


async def test_a_migrated_store_takes_new_entries_and_stays_append_only(old_store: Path) -> None:
    async with await Store.open(old_store) as store:
        incident = (await store.incidents(subject="m"))[0]
        rows = await store.timeline(incident.id)
        entry = TimelineEntry(at=rows[-1].at, subject="m", record=Note(text="after the upgrade"))
        await store.append(incident.id, entry)
        again = await store.timeline(incident.id)
    assert [r.summary for r in again] == [*(r.summary for r in rows), "after the upgrade"]
    assert again[-1].kind is EntryKind.NOTE
    async with await Store.open(old_store) as store:  # opening again migrates nothing twice
        assert await store.timeline(incident.id) == again
    raw = sqlite3.connect(old_store)
    try:
        with pytest.raises(sqlite3.IntegrityError, match=r"^timeline is append-only$"):
            raw.execute("UPDATE timeline SET summary = 'rewritten'")
    finally:
        raw.close()


def test_the_cli_reads_an_old_store(old_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = {"kind": "openai", "url": "http://127.0.0.1:9", "model": "m", "host": "forge"}
    config = write_fleet(old_store.parent.parent, {"m": m})
    assert main(["--config", str(config), "incidents"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "SUBJECT", "STATUS", "OPENED", "LASTED", "STATE", "CAUSE"]
    assert lines[1].split()[:3] == ["#2", "spark1", "closed"]
    assert lines[1].endswith("host spark1 does not answer: connection refused")
    assert lines[2].split()[:3] == ["#1", "m", "open"]
    assert lines[2].endswith("escalated  revive")


def test_a_version_1_transition_reads_with_its_typed_actor() -> None:
    """Version 1 kept a silence's who/via in `extra` and a restart's person as a bare name; the
    row is not rewritten (append-only): it is upgraded each time it is read."""
    silence: dict[str, JSONValue] = {
        "source": "healthy",
        "dest": "maintenance",
        "trigger": "silence",
        "note": "silenced for 1h by @op: upgrade",
        "until": "2026-11-25T08:00:00+00:00",
        "extra": {"silence": "3", "target": "ds4", "who": "@op", "via": "telegram", "why": "x"},
    }
    record = decode("transition", 1, silence, kind="transition", text="")
    assert isinstance(record, Transition)
    assert (record.source, record.dest, record.trigger) == (
        State.HEALTHY,
        State.MAINTENANCE,
        Trigger.SILENCE,
    )
    assert record.actor == Actor(who="@op", via=Via.TELEGRAM)
    assert record.extra == {"silence": "3", "target": "ds4", "why": "x"}
    restart: dict[str, JSONValue] = {
        "source": "down",
        "dest": "starting",
        "trigger": "restarted",
        "note": "restarted by alice",
        "actor": "alice",
    }
    record = decode("transition", 1, restart, kind="transition", text="")
    assert isinstance(record, Transition)
    assert record.actor == Actor(who="alice")
    assert str(record.actor) == "alice"


@pytest.mark.parametrize(
    ("verdict", "judged"),
    [
        ("down: probe confirms: connection refused", True),
        ("not judged: remediating", False),
        ("evidence only", False),
    ],
)
def test_a_version_1_unit_event_says_whether_it_was_judged(verdict: str, judged: bool) -> None:
    payload: dict[str, JSONValue] = {
        "host": "spark1",
        "unit": "vllm.service",
        "event": "failed",
        "line": "vllm.service failed: status=127",
        "message": "vllm.service: Failed with result 'exit-code'.",
        "verdict": verdict,
    }
    record = decode("unit_event", 1, payload, kind="evidence", text="")
    assert isinstance(record, UnitHeard)
    assert (record.verdict, record.judged) == (verdict, judged)
