"""The command line: exit codes, plain errors, and the documented `--json` shapes."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.cli import main
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.streamstatus import StreamPhase, StreamStatus
from supervisor.judge.machine import State, Trigger
from supervisor.record.store.cursors import save_streams
from supervisor.record.store.lease import claim
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.state import Transition
from tests import warmstart
from tests.helpers import write_fleet

T0 = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


def _fleet(tmp_path: Path) -> Path:
    return write_fleet(
        tmp_path,
        {
            "ds4": {"kind": "openai", "url": "http://127.0.0.1:9", "model": "ds"},
            "asr": {"kind": "health", "url": "http://127.0.0.1:9/health"},
        },
        hosts={"forge": {"local": True}, "spark1": {"address": "127.0.0.11"}},
    )


async def _populate(db: Path) -> int:
    """One closed incident for ds4, as the daemon would have written it."""
    async with await Store.open(db) as store:
        down = Snapshot(
            kind=SubjectKind.ENDPOINT,
            name="ds4",
            state="down",
            since=T0,
            updated_at=T0,
            last_reason="connection refused",
            fail_streak=3,
        )
        down_record = Transition(
            source=State.HEALTHY,
            dest=State.DOWN,
            trigger=Trigger.DOWN,
            note="connection refused (2 failures and a failed re-probe)",
        )
        entry = TimelineEntry(at=T0, subject="ds4", record=down_record)
        incident = await store.transition(
            snapshot=down, entry=entry, open_cause="connection refused"
        )
        assert incident is not None
        back = T0 + timedelta(minutes=4, seconds=2)
        healthy = Snapshot(
            kind=SubjectKind.ENDPOINT,
            name="ds4",
            state="healthy",
            since=back,
            updated_at=back,
            last_ttft_s=0.41,
            last_tok_s=38.2,
            last_ok_at=back,
        )
        await store.transition(
            snapshot=healthy,
            entry=TimelineEntry(
                at=back,
                subject="ds4",
                record=Transition(
                    source=State.DOWN,
                    dest=State.HEALTHY,
                    trigger=Trigger.PASS,
                    note="real check passed",
                ),
            ),
            close_resolution="completion passed (ttft 0.41s, 38.2 tok/s)",
        )
        await store.add_sample(
            ProbeResult(
                endpoint="ds4",
                tier=Tier.DEEP,
                check="completion",
                outcome=ProbeOutcome.OK,
                reason="",
                at=back,
                latency_s=1.2,
                ttft_s=0.41,
                tok_s=38.2,
            )
        )
        return incident


def test_check_accepts_a_good_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _fleet(tmp_path)
    (tmp_path / "playbooks").mkdir()
    assert main(["--config", str(path), "check"]) == 0
    assert capsys.readouterr().out == (
        f"{path}: ok (2 hosts, 2 endpoints)\n{tmp_path / 'playbooks'}: ok (0 rules)\n"
    )


def test_check_checks_the_playbook(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _fleet(tmp_path)
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "bad.yaml").write_text("id: bad\ntitle: t\n")
    assert main(["--config", str(path), "check"]) == 1
    out, err = capsys.readouterr()
    assert out == f"{path}: ok (2 hosts, 2 endpoints)\n"
    bad = tmp_path / "playbooks" / "bad.yaml"
    assert err.splitlines() == [
        f"{bad}:1: rule 'bad': severity: required",
        f"{bad}:1: rule 'bad': when: required",
        f"{bad}:1: rule 'bad': mode: required",
        f"{tmp_path / 'playbooks'}: 1 rule file(s) disabled by the problems above",
    ]


def test_check_names_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "defaults:\n"
        "  probe:\n"
        "    failures_to_down: many\n"
        "endpoints:\n"
        "  ds4: {kind: vllm, url: http://x:8000, model: m}\n"
    )
    assert main(["--config", str(path), "check"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:3: defaults.probe.failures_to_down: expected an integer, got 'many'",
        f"{path}:5: endpoints.ds4.kind: "
        "expected one of openai, ollama, health, embedding, rerank, asr, tts, got 'vllm'",
    ]


def test_a_missing_store_is_a_plain_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _fleet(tmp_path)
    assert main(["--config", str(path), "status"]) == 2
    db = tmp_path / "state" / "supervisor.db"
    assert capsys.readouterr().err == (
        f"fleet-supervisor: no store at {db} (has the daemon run yet?)\n"
    )


def test_status_json_lists_every_configured_endpoint_and_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _fleet(tmp_path)
    asyncio.run(_populate(tmp_path / "state" / "supervisor.db"))
    assert main(["--config", str(path), "status", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {
        "generated_at",
        "endpoints",
        "hosts",
        "leadership",
        "repair_by_rule",
        "doctor",
        "store",
    }
    for repair in document["repair_by_rule"].values():  # its incident, while under 30 days old
        assert set(repair) == {"mttr_s", "repaired", "open"}
    for subject in document["endpoints"] + document["hosts"]:
        windows = subject.pop("availability")  # the numbers: tests/test_availability.py
        assert list(windows) == ["24h", "7d", "30d"]
        assert set(windows["30d"]) == {
            "availability",
            "serving_s",
            "down_s",
            "silenced_s",
            "unsupervised_s",
        }
        if "repair" in subject:
            assert set(subject.pop("repair")) == {"mttr_s", "repaired", "open"}
    assert document["doctor"] is None  # no doctor run yet
    assert document["store"] == {"writable": True, "problem": None}
    assert document["leadership"] == {
        "leader": None,
        "host": None,
        "epoch": 0,
        "current": False,
        "since": None,
        "renewed_at": None,
        "expires_at": None,
        "this_instance": None,
        "leading": False,
        "line": "leader: none (no instance holds the lease)",
    }
    assert document["endpoints"] == [
        {
            "name": "ds4",
            "kind": "openai",
            "url": "http://127.0.0.1:9",
            "state": "healthy",
            "since": "2026-11-23T03:04:02Z",
            "incident_id": None,
            "last_reason": "",
            "last_ok_at": "2026-11-23T03:04:02Z",
            "last_ttft_s": 0.41,
            "last_tok_s": 38.2,
            "fail_streak": 0,
        },
        {
            "name": "asr",
            "kind": "health",
            "url": "http://127.0.0.1:9/health",
            "state": "unknown",
            "since": None,
            "incident_id": None,
            "last_reason": "",
            "last_ok_at": None,
            "last_ttft_s": None,
            "last_tok_s": None,
            "fail_streak": 0,
        },
    ]
    assert document["hosts"] == [
        {
            "name": "forge",
            "local": True,
            "state": "unknown",
            "since": None,
            "incident_id": None,
            "last_reason": "",
            "events": None,
            "events_phase": None,
        },
        {
            "name": "spark1",
            "local": False,
            "state": "unknown",
            "since": None,
            "incident_id": None,
            "last_reason": "",
            "events": None,
            "events_phase": None,
        },
    ]


def test_status_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _fleet(tmp_path)
    asyncio.run(_populate(tmp_path / "state" / "supervisor.db"))
    assert main(["--config", str(path), "status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "ENDPOINT",
        "STATE",
        "SINCE",
        "INCIDENT",
        "TTFT",
        "TOK/S",
        "LAST",
        "PROBLEM",
    ]
    assert lines[1].split()[:2] == ["ds4", "healthy"]
    assert lines[1].split()[-3:] == ["0.41s", "38.2", "-"]
    assert lines[-1] == "leader: none (no instance holds the lease)"


async def _lead(db: Path) -> None:
    async with await Store.open(db) as store, store.tx(write=True) as conn:
        await claim(conn, holder="spark-b", host="spark2", epoch=None, lease_ms=60_000)


def test_status_says_who_leads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _fleet(tmp_path)
    asyncio.run(_populate(tmp_path / "state" / "supervisor.db"))
    renewed = time.monotonic()
    asyncio.run(_lead(tmp_path / "state" / "supervisor.db"))
    assert main(["--config", str(path), "status"]) == 0
    since = time.monotonic() - renewed  # over a second on a loaded machine (seen: "1s ago")
    last = capsys.readouterr().out.splitlines()[-1]
    found = re.fullmatch(r"leader: spark-b on spark2 \(epoch 1, renewed (\d+)s ago\)", last)
    assert found is not None, last
    assert int(found[1]) <= since + 0.5  # (rounded to the second)
    assert main(["--config", str(path), "status", "--json"]) == 0
    leadership = json.loads(capsys.readouterr().out)["leadership"]
    assert (leadership["leader"], leadership["epoch"], leadership["current"]) == (
        "spark-b",
        1,
        True,
    )


def test_incidents_and_timeline_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _fleet(tmp_path)
    incident = asyncio.run(_populate(tmp_path / "state" / "supervisor.db"))
    assert main(["--config", str(path), "incidents", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == {
        "incidents": [
            {
                "id": incident,
                "subject_kind": "endpoint",
                "subject": "ds4",
                "opened_at": "2026-11-23T03:00:00Z",
                "closed_at": "2026-11-23T03:04:02Z",
                "duration_s": 242.0,
                "cause": "connection refused",
                "symptom": "connection refused",
                "diagnosis": None,
                "resolution": "completion passed (ttft 0.41s, 38.2 tok/s)",
                "state": "healthy",
                "entries": 2,
            }
        ]
    }
    assert main(["--config", str(path), "incidents", "--open", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"incidents": []}
    assert main(["--config", str(path), "timeline", str(incident), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["incident"] == listed["incidents"][0]
    assert [(e["kind"], e["summary"]) for e in document["timeline"]] == [
        ("transition", "healthy -> down: connection refused (2 failures and a failed re-probe)"),
        ("transition", "down -> healthy: real check passed"),
    ]
    assert [(e["type"], e["version"]) for e in document["timeline"]] == [("transition", 2)] * 2
    assert document["timeline"][0]["data"] == {
        "source": "healthy",
        "dest": "down",
        "trigger": "confirm_down",
        "note": "connection refused (2 failures and a failed re-probe)",
        "of_host": False,
        "extra": {},
    }


def test_timeline_text_and_unknown_incident(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _fleet(tmp_path)
    incident = asyncio.run(_populate(tmp_path / "state" / "supervisor.db"))
    assert main(["--config", str(path), "timeline", str(incident)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"incident #{incident} ds4: connection refused (closed 2026-11-23 03:04:02Z)")
    assert out[1] == "resolved: completion passed (ttft 0.41s, 38.2 tok/s)"
    assert out[2].endswith(
        "transition   healthy -> down: connection refused (2 failures and a failed re-probe)"
    )
    assert main(["--config", str(path), "timeline", "99"]) == 2
    assert capsys.readouterr().err == "fleet-supervisor: no incident #99\n"


def test_incidents_since_takes_a_duration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["incidents", "--since", "yesterday"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "fleet-supervisor incidents: error: argument --since: "
        "expected a duration like 90s, 15m or 2h, got 'yesterday'"
    )


async def _cli(*args: str) -> tuple[int, str, str]:
    done = await warmstart.run_async(args, timeout=60)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow
async def test_probe_passes_then_fails_with_a_reason(tmp_path: Path) -> None:
    async with VllmSim(SimBehaviour(tok_s=2000.0), model="ds") as sim:
        path = write_fleet(
            tmp_path,
            {"ds4": {"kind": "openai", "url": sim.url, "model": "ds", "expect_reasoning": True}},
        )
        code, out, _ = await _cli("--config", str(path), "probe", "ds4", "--json")
        assert code == 0
        document = json.loads(out)
        assert document["ok"] is True
        assert [(r["tier"], r["check"], r["outcome"]) for r in document["results"]] == [
            ("liveness", "models", "ok"),
            ("deep", "completion", "ok"),
        ]
        sim.behaviour.reasoning_field = None
        code, out, _ = await _cli("--config", str(path), "probe", "ds4")
        assert code == 1
        assert out.splitlines()[-1] == "  deep completion degraded: no reasoning text"
        code, _, err = await _cli("--config", str(path), "probe", "nope")
        assert code == 2
        assert err == f"fleet-supervisor: no endpoint 'nope' in {path} (endpoints: ds4)\n"


SUDO_REFUSED = "journalctl failed: sudo: a password is required"


async def _streams(db: Path) -> None:
    async with await Store.open(db) as store:
        await save_streams(
            store,
            {"spark1": "s=1;i=2"},
            {"spark1": StreamStatus(phase=StreamPhase.POLLING, reason=SUDO_REFUSED)},
            at=datetime(2026, 11, 23, 3, 4, 2, tzinfo=UTC),
        )


def test_status_reads_the_event_streams_from_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _fleet(tmp_path)
    asyncio.run(_populate(tmp_path / "state" / "supervisor.db"))
    asyncio.run(_streams(tmp_path / "state" / "supervisor.db"))
    assert main(["--config", str(path), "status", "--json"]) == 0
    hosts = json.loads(capsys.readouterr().out)["hosts"]
    assert [(h["name"], h["events"], h["events_phase"]) for h in hosts] == [
        ("forge", None, None),
        ("spark1", f"polling: {SUDO_REFUSED}", "polling"),
    ]
    assert main(["--config", str(path), "status"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "warning: host spark1 unit events: polling: journalctl failed: sudo: a password is required"
    )
