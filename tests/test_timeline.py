"""The typed timeline records: every type survives the store's JSON round trip, renders the exact
summary its producers wrote before records existed, and a reader never crashes on what it
cannot type."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

import supervisor
from supervisor.core.actor import Actor, Via
from supervisor.judge.machine import HostState, State, Trigger
from supervisor.record.store.coltypes import dump_json
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget
from supervisor.record.timeline.base import REGISTRY, EntryKind, Record
from supervisor.record.timeline.codec import Unknown, decode, encode
from supervisor.record.timeline.control import (
    Acked,
    Legacy,
    Note,
    Notification,
    Paused,
    Resumed,
    Silenced,
    Unsilenced,
)
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.record.timeline.parts import CommandRun, ProbeSample, ProgressSample, UnitLeft
from supervisor.record.timeline.repair import (
    AttemptFinished,
    AttemptStarted,
    Diagnosis,
    Escalation,
    Evidence,
    Settled,
    StepRan,
    StepStarted,
    UnitsLeft,
    Verification,
)
from supervisor.record.timeline.state import Probe, Transition
from supervisor.record.timeline.unit import UnitHeard

T0 = datetime(2026, 11, 23, 3, 0, 0, tzinfo=UTC)
FAIL = ProbeSample(
    at=T0, tier="liveness", check="health", outcome="fail", reason="connection refused"
)
OK = ProbeSample(
    at=T0,
    tier="deep",
    check="completion",
    outcome="ok",
    latency_s=0.52,
    http_status=200,
    ttft_s=0.41,
    tok_s=38.2,
    tokens=12,
    detail="The user asks for a small sum.",
)
KILL = CommandRun(
    host="spark1",
    command="pkill -KILL -f '^VLLM::Worker_TP0'",
    exit_status=0,
    duration_s=0.012,
    output_tail="",
)
UNTIL = datetime(2026, 11, 23, 5, 0, 0, tzinfo=UTC)

#: (record, kind, the summary it renders): one row per registered type, and a few variants.
CASES: list[tuple[Record, EntryKind, str]] = [
    (
        Transition(
            source=State.HEALTHY,
            dest=State.DOWN,
            trigger=Trigger.DOWN,
            note="connection refused (2 failures and a failed re-probe)",
            probe=FAIL,
            probes=(FAIL, FAIL),
        ),
        EntryKind.TRANSITION,
        "healthy -> down: connection refused (2 failures and a failed re-probe)",
    ),
    (
        Transition(
            source=HostState.REACHABLE,
            dest=HostState.UNREACHABLE,
            trigger=Trigger.HOST_LOST,
            note="ssh timed out",
            of_host=True,
            failures=3,
        ),
        EntryKind.TRANSITION,
        "host reachable -> unreachable: ssh timed out",
    ),
    (
        Transition(
            source=State.HEALTHY,
            dest=State.MAINTENANCE,
            trigger=Trigger.SILENCE,
            note="silenced for 2h by @op",
            actor=Actor(who="@op"),
            until=UNTIL,
            extra={"ticket": "OPS-1"},
        ),
        EntryKind.TRANSITION,
        "healthy -> maintenance: silenced for 2h by @op",
    ),
    (
        Probe(sample=OK, note="liveness passed while verifying: real check now"),
        EntryKind.PROBE,
        "deep completion ok (liveness passed while verifying: real check now)",
    ),
    (
        Probe(
            sample=OK,
            note="liveness passed",
            count=12,
            last_at=UNTIL,
            progress=ProgressSample(
                verdict="busy",
                reason="busy: 48 running, 20 waiting, 940 tok/s generated",
                running=48,
                waiting=20,
                tok_s=940,
                generation_tokens=1750000,
                kv_cache_usage=0.97,
                window_s=5.0,
            ),
        ),
        EntryKind.PROBE,
        f"deep completion ok (liveness passed), 12 times, last at {UNTIL:%H:%M:%SZ}",
    ),
    (
        UnitHeard(
            host="spark1",
            unit="vllm.service",
            event="failed",
            line="vllm.service failed: status=127, 2 restarts (exit-code)",
            message="vllm.service: Failed with result 'exit-code'.",
            verdict="probe confirms: connection refused",
            lines=("/bin/bash: /opt/x.sh: No such file or directory",),
            result="exit-code",
            exit_status=127,
            n_restarts=2,
            cursor="s=1;i=2",
        ),
        EntryKind.EVIDENCE,
        "systemd on spark1: vllm.service failed: status=127, 2 restarts (exit-code); "
        "probe confirms: connection refused",
    ),
    (
        Evidence(
            evidence_id="port",
            collector="listeners",
            scope="vllm-m.service@spark1",
            facts={"count": 1, "commands": ["VLLM::Worker_TP0"], "pids": [41]},
            commands=(KILL,),
        ),
        EntryKind.EVIDENCE,
        "listeners (port) on vllm-m.service@spark1: 3 facts",
    ),
    (
        Settled(
            scope="vllm-qwen.service@spark1",
            host="spark1",
            unit="vllm-qwen.service",
            outcome="failed again",
            before="signal 9, activating/auto-restart, 0 restarts",
            after="status=127, activating/auto-restart, 1 restart",
            waited_s=3.62,
            bound_s=36.0,
        ),
        EntryKind.EVIDENCE,
        "waited 3.6s (of up to 36.0s) for the restart of vllm-qwen.service@spark1: failed again: "
        "status=127, activating/auto-restart, 1 restart (before: signal 9, "
        "activating/auto-restart, 0 restarts)",
    ),
    (
        Evidence(evidence_id="j", collector="journal", scope="ds4", error="ssh: timed out"),
        EntryKind.EVIDENCE,
        "journal (j) on ds4: ssh: timed out",
    ),
    (
        Diagnosis(
            endpoint="m",
            state="down",
            rule="stale-listener",
            title="old vLLM workers hold the port",
            scopes=("vllm-m.service@spark1",),
            facts={"vllm-m.service@spark1": {"port.count": 1}},
            lines=("rule stale-listener: matched",),
        ),
        EntryKind.DIAGNOSIS,
        "m (down): stale-listener matched on vllm-m.service@spark1",
    ),
    (Diagnosis(endpoint="bad", state="down"), EntryKind.DIAGNOSIS, "bad (down): no rule matched"),
    (
        AttemptStarted(attempt=3, rule="stale-listener"),
        EntryKind.ATTEMPT,
        "attempt 3 (stale-listener) started",
    ),
    (
        AttemptStarted(attempt=4, rule="manual-restart", actor="@op"),
        EntryKind.ATTEMPT,
        "attempt 4 (manual-restart) started by @op",
    ),
    (
        AttemptFinished(attempt=3, rule="slow-fix", outcome="interrupted"),
        EntryKind.ATTEMPT,
        "attempt 3 (slow-fix) was interrupted: the daemon stopped while it ran; its steps are "
        "not resumed",
    ),
    (
        AttemptFinished(
            attempt=3, rule="slow-fix", outcome="interrupted", why="deposed: b leads with epoch 3"
        ),
        EntryKind.ATTEMPT,
        "attempt 3 (slow-fix) was interrupted: deposed: b leads with epoch 3; its steps are not "
        "resumed",
    ),
    (
        StepStarted(index=0, action="shell", target="forge"),
        EntryKind.ATTEMPT,
        "step 1 shell on forge: started",
    ),
    (
        AttemptFinished(attempt=3, rule="r1", outcome="healed"),
        EntryKind.ATTEMPT,
        "attempt 3 (r1) finished: healed",
    ),
    (
        StepRan(
            index=0,
            action="kill_processes",
            target="spark1",
            ok=True,
            result="killed 1 process",
            commands=(KILL,),
        ),
        EntryKind.ACTION,
        "step 1 kill_processes on spark1: ok: killed 1 process",
    ),
    (
        StepRan(index=1, action="restart_units", target="ds4", ok=False, result="exit 1"),
        EntryKind.ACTION,
        "step 2 restart_units on ds4: failed: exit 1",
    ),
    (
        StepRan(index=0, action="shell", target="forge", ok=True, planned=True, result="dry run"),
        EntryKind.ACTION,
        "step 1 shell on forge: planned: dry run",
    ),
    (
        UnitsLeft(
            attempt=4,
            rule="hung-engine",
            units=(
                UnitLeft(
                    host="spark1",
                    unit="vllm-qwen.service",
                    found="active/running",
                    after_steps="inactive/dead",
                    left="active/running",
                    pid=4242,
                    started=True,
                ),
                UnitLeft(
                    host="spark2",
                    unit="vllm-w.service",
                    found="active/running",
                    after_steps="active/running",
                    left="active/running",
                    pid=77,
                ),
            ),
            verified=True,
        ),
        EntryKind.ACTION,
        "attempt 4 (hung-engine) stopped; units left: vllm-qwen.service@spark1: active/running, "
        "then inactive/dead, started: active/running (pid 4242); vllm-w.service@spark2: "
        "active/running (pid 77); it serves again",
    ),
    (
        UnitsLeft(
            attempt=5,
            rule="r1",
            units=(
                UnitLeft(
                    host="spark1",
                    unit="u.service",
                    found="active/running",
                    after_steps="failed/failed",
                    left="failed/failed",
                    started=True,
                ),
            ),
            error="systemctl start u.service on spark1 failed: exit 1",
        ),
        EntryKind.ACTION,
        "attempt 5 (r1) stopped; units left: u.service@spark1: active/running, then "
        "failed/failed, started: failed/failed; starting again failed: systemctl start "
        "u.service on spark1 failed: exit 1",
    ),
    (
        Verification(rule="revive", ok=True, within_s=10, ttft_s=0.41, tok_s=38.2),
        EntryKind.VERIFICATION,
        "verified: revive healed it",
    ),
    (
        Verification(rule="always", ok=False, within_s=0.3),
        EntryKind.VERIFICATION,
        "always: not verified within 300ms",
    ),
    (
        Escalation(why="the server is not running", rule="revive", runbook="runbooks/revive.md"),
        EntryKind.DECISION,
        "escalated: the server is not running (runbook: runbooks/revive.md)",
    ),
    (
        Escalation(why="no rule matched: a person must look", dry_run=True),
        EntryKind.DECISION,
        "dry run: would escalate: no rule matched: a person must look",
    ),
    (
        Decision(outcome=Outcome.PAUSED),
        EntryKind.DECISION,
        "automatic action is paused: not acting",
    ),
    (
        Decision(outcome=Outcome.MOVED_ON, state="healthy"),
        EntryKind.DECISION,
        "now healthy: not acting",
    ),
    (
        Decision(outcome=Outcome.HOSTS_BUSY, holders={"spark1": "ds4", "spark2": "qwen"}),
        EntryKind.DECISION,
        "waiting for hosts busy with a repair: spark1 (by ds4), spark2 (by qwen)",
    ),
    (
        Decision(
            outcome=Outcome.DRY_RUN_PLAN,
            rule="always",
            budget="attempt 1 of 2 for always in 1h",
            plan=("shell on forge: touch /tmp/never-written",),
        ),
        EntryKind.DECISION,
        "dry run: would apply always (attempt 1 of 2 for always in 1h): "
        "shell on forge: touch /tmp/never-written",
    ),
    (
        Decision(outcome=Outcome.RESTART_REFUSED, actor="alice", why="a repair is running"),
        EntryKind.DECISION,
        "restart by alice refused: a repair is running",
    ),
    (
        Decision(outcome=Outcome.RESTART_PLAN, actor="alice", plan=("restart_units on ds4",)),
        EntryKind.DECISION,
        "dry run: restart by alice: ['restart_units on ds4']",
    ),
    (
        Decision(outcome=Outcome.RESTART_FAILED, actor="alice", why="step 1 failed"),
        EntryKind.DECISION,
        "restart by alice failed: step 1 failed",
    ),
    (
        Silenced(
            actor=Actor(who="@op", via=Via.TELEGRAM),
            target="ds4",
            why="driver upgrade",
            until=UNTIL,
            silence=3,
        ),
        EntryKind.NOTE,
        "silenced ds4 (#3) until 2026-11-23 05:00:00Z by @op on Telegram: driver upgrade",
    ),
    (
        Silenced(actor=Actor(who="alice", via=Via.CLI), target="host:spark1", until=UNTIL),
        EntryKind.NOTE,
        "silenced host:spark1 until 2026-11-23 05:00:00Z by alice from the CLI",
    ),
    (
        Unsilenced(actor=Actor(who="@op", via=Via.WEB), target="ds*", silences=(3, 4)),
        EntryKind.NOTE,
        "unsilenced ds* (#3, #4) by @op on the fleet page",
    ),
    (
        Paused(who="@op", why="maintenance window"),
        EntryKind.NOTE,
        "automatic action paused by @op: maintenance window",
    ),
    (
        Paused(who="@op", until=UNTIL, endpoint="ds4"),
        EntryKind.NOTE,
        "automatic action paused for ds4 until 2026-11-23 05:00:00Z by @op",
    ),
    (Resumed(who="@op"), EntryKind.NOTE, "automatic action resumed by @op"),
    (
        Acked(who="@op", via="Telegram"),
        EntryKind.NOTE,
        "acknowledged by @op on Telegram: no more reminders",
    ),
    (
        Notification(channel="telegram", message="opened", chat_id=42, outbox_id=1),
        EntryKind.NOTIFICATION,
        "telegram: opened message sent to chat 42",
    ),
    (
        Note(text="repair runner failed: RuntimeError('x')"),
        EntryKind.NOTE,
        "repair runner failed: RuntimeError('x')",
    ),
    (
        Legacy(old_kind="decision", text="a sentence of 2025", data={"x": 1}),
        EntryKind.DECISION,
        "a sentence of 2025",
    ),
]


def test_units_left_tells_the_person_what_was_started_again() -> None:
    qwen = UnitLeft(
        host="spark1", unit="q.service", found="active/running", after_steps="inactive/dead",
        left="active/running", started=True,
    )  # fmt: skip
    still = UnitLeft(host="spark2", unit="w.service", found="active/running",
                     after_steps="active/running", left="active/running")  # fmt: skip
    assert UnitsLeft(attempt=1, rule="r", units=(still,)).restored == ""
    assert UnitsLeft(attempt=1, rule="r", units=(qwen, still), verified=True).restored == (
        "q.service@spark1 was started again and serves"
    )
    assert UnitsLeft(attempt=1, rule="r", units=(qwen,), verified=False).restored == (
        "q.service@spark1 was started again and does not serve yet"
    )
    failed = UnitsLeft(attempt=1, rule="r", units=(qwen,), error="exit 1")
    assert failed.restored == "starting q.service@spark1 again failed: exit 1"


def test_every_registered_type_is_in_the_table() -> None:
    assert {record.tag for record, _, _ in CASES} == set(REGISTRY)


@pytest.mark.parametrize(("record", "kind", "summary"), CASES, ids=lambda v: None)
def test_round_trip_and_summary(record: Record, kind: EntryKind, summary: str) -> None:
    stored = json.loads(dump_json(encode(record)))  # what the store writes and reads back
    back = decode(record.tag, record.version, stored, kind=kind.value, text=summary)
    assert back == record
    assert (back.kind, back.summary) == (kind, summary)


def test_a_payload_leaves_out_what_was_not_set() -> None:
    moved = Transition(source=State.DOWN, dest=State.HEALTHY, trigger=Trigger.PASS, note="n")
    assert encode(moved) == {
        "source": "down",
        "dest": "healthy",
        "trigger": "pass_check",
        "note": "n",
        "of_host": False,
        "extra": {},
    }
    assert encode(FAIL)["at"] == "2026-11-23T03:00:00+00:00"


def test_a_payload_that_is_no_object_is_read_as_unknown() -> None:
    record = decode("note", 1, ["not", "an", "object"], kind="mystery", text="?")  # type: ignore[arg-type]
    assert isinstance(record, Unknown)
    assert (record.problem, record.kind, record.payload) == (
        "note: Input should be an object",
        EntryKind.NOTE,
        {"payload": ["not", "an", "object"]},
    )


@pytest.mark.parametrize(
    ("tag", "version", "payload", "problem"),
    [
        ("teleported", 1, {"to": "mars"}, "unknown type 'teleported'"),
        ("transition", 3, {}, "transition version 3 is newer than this code reads (2)"),
        ("note", 1, {}, "note: text: Field required"),
        ("note", 1, {"text": 7}, "note: text: Input should be a valid string"),
        (
            "probe",
            1,
            {"sample": [], "note": ""},
            "probe: sample: Input should be an object",
        ),
        (
            "decision",
            1,
            {"outcome": "vanished"},
            "decision: outcome: Input should be 'paused', 'moved_on', 'hosts_busy', "
            "'dry_run_plan', 'restart_refused', 'restart_plan', 'restart_failed' or "
            "'still_escalated'",
        ),
        (
            "probe",
            1,
            {
                "sample": {"at": "soon", "tier": "deep", "check": "completion", "outcome": "ok"},
                "note": "",
            },
            "probe: sample.at: Input should be a valid datetime, input is too short",
        ),
    ],
)
def test_what_cannot_be_typed_is_read_as_unknown(
    tag: str, version: int, payload: dict[str, object], problem: str
) -> None:
    record = decode(tag, version, payload, kind="decision", text="as it was stored")  # type: ignore[arg-type]
    assert isinstance(record, Unknown)
    assert (record.problem, record.kind, record.summary) == (
        problem,
        EntryKind.DECISION,
        "as it was stored",
    )
    assert (record.tag, record.version, encode(record)) == (tag, version, payload)


PACKAGE = Path(supervisor.__file__).parent
#: The one place allowed to read the old sentences: the migration of schema-1 stores, once.
MIGRATION = PACKAGE / "record" / "timeline" / "migrate.py"
#: A summary (or a transition's note) taken apart, or tested for words.
SENTENCE_READ = re.compile(
    r"\.(summary|note)\)?\.(startswith|endswith|split|rsplit|partition|rpartition|removeprefix"
    r"|removesuffix|find|index|count)\("
    r"|\bin \w+(\.\w+)*\.(summary|note)\b"
    r"|(?<![\w.])re\.\w+\([^)]*\b(summary|note)\b"
)
READS_TIMELINE = ("TimelineRow", "supervisor.record.timeline", ".timeline(")


def _sources() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p != MIGRATION]


def test_no_code_takes_a_timeline_sentence_apart() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in _sources()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if SENTENCE_READ.search(line)
    ]
    assert found == []


def test_no_timeline_reader_uses_regular_expressions() -> None:
    readers = [p for p in _sources() if any(m in p.read_text() for m in READS_TIMELINE)]
    assert len(readers) > 10  # the composer, the lab report, the CLI, the bot, ...
    assert [
        str(p.relative_to(PACKAGE))
        for p in readers
        if re.search(r"^import re$|^from re import", p.read_text(), re.MULTILINE)
    ] == []


async def test_the_cause_is_the_symptom_until_a_rule_diagnoses_it(
    store_target: StoreTarget,
) -> None:
    async with await Store.open(store_target) as store:
        down = Snapshot(kind=SubjectKind.ENDPOINT, name="m", state="down", since=T0, updated_at=T0)
        opened = TimelineEntry(
            at=T0,
            subject="m",
            record=Transition(
                source=State.HEALTHY, dest=State.DOWN, trigger=Trigger.DOWN, note="x"
            ),
        )
        incident = await store.transition(
            snapshot=down, entry=opened, open_cause="connection refused"
        )
        assert incident is not None
        causes = []
        for record in (
            Diagnosis(endpoint="m", state="down"),
            Diagnosis(endpoint="m", state="down", rule="revive", title="the server is not running"),
            Diagnosis(endpoint="m", state="down"),  # a later miss keeps the last match
            Diagnosis(endpoint="m", state="degraded", rule="slow", title="tok/s far under"),
        ):
            await store.append(incident, TimelineEntry(at=T0, subject="m", record=record))
            row = await store.incident(incident)
            assert row is not None
            causes.append((row.symptom, row.cause))
    assert causes == [
        ("connection refused", "connection refused"),
        ("connection refused", "revive: the server is not running"),
        ("connection refused", "revive: the server is not running"),
        ("connection refused", "slow: tok/s far under"),
    ]
