"""The codec over every registered record type, every field set: a record survives the store's
JSON round trip, its payload is the JSON the store already holds (`tests/data/timeline/
full-records.json`, written by the codec before pydantic; the drill's stored timeline in
`tests/data/history`), and that stored JSON still reads. A fixed-length tuple reads item by
item."""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from supervisor.core.actor import Actor, Via
from supervisor.judge.machine import HostState, State, Trigger
from supervisor.record.store.coltypes import dump_json
from supervisor.record.timeline.base import REGISTRY, JSONValue, Record
from supervisor.record.timeline.codec import Unknown, decode, decode_value, encode
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

DATA = Path(__file__).parent / "data"
STORED = DATA / "timeline" / "full-records.json"
DRILL = DATA / "history" / "unknown-failure-drill.json"

T1 = datetime(2026, 11, 23, 3, 0, 0, 123456, tzinfo=UTC)
T2 = datetime(2026, 11, 23, 5, 30, tzinfo=UTC)
SAMPLE = ProbeSample(
    at=T1,
    tier="deep",
    check="completion",
    outcome="fail",
    reason="timed out after 30s",
    latency_s=30.002,
    http_status=504,
    ttft_s=0.41,
    tok_s=38.2,
    tokens=12,
    detail="The user asks for a small sum.",
)
PROGRESS = ProgressSample(
    verdict="hung",
    reason="hung: 3 running, 0 waiting, generation_tokens_total frozen at 412 for 5.0s",
    running=3.0,
    waiting=1.0,
    tok_s=0.5,
    generation_tokens=412.0,
    kv_cache_usage=0.97,
    window_s=5.0,
)
RAN = CommandRun(
    host="spark1",
    command="systemctl restart vllm.service",
    exit_status=1,
    duration_s=0.012,
    error="exit 1",
    dry_run=True,
    output_tail="Job for vllm.service failed.",
)
SENT = CommandRun(
    host="spark2",
    command="pkill -KILL -f '^VLLM::Worker_TP0'",
    exit_status=0,
    duration_s=0.5,
    error="pkill: killing pid 41 failed",
    dry_run=True,
    output_tail="41",
)
NO_EXIT = CommandRun(host="spark2", command="true", exit_status=None, duration_s=30.0)
OP = Actor(who="@op", via=Via.TELEGRAM)
LEFT = UnitLeft(
    host="spark1",
    unit="vllm.service",
    found="active/running",
    after_steps="inactive/dead",
    left="failed/failed",
    pid=4242,
    started=True,
    error="ssh: timed out",
)

#: One record per registered type, every field set away from its default.
FULL: tuple[Record, ...] = (
    Transition(
        source=HostState.REACHABLE,
        dest=HostState.UNREACHABLE,
        trigger=Trigger.HOST_LOST,
        note="ssh timed out",
        of_host=True,
        rule="revive",
        actor=OP,
        probe=SAMPLE,
        probes=(SAMPLE, dataclasses.replace(SAMPLE, tier="liveness", check="health")),
        host="spark1",
        why="budget spent",
        runbook="runbooks/revive.md",
        until=T2,
        reason="the unit restarted",
        failures=3,
        progress=PROGRESS,
        extra={"ticket": "OPS-1", "by": "cron"},
    ),
    Probe(sample=SAMPLE, note="failed (1/3)", count=12, last_at=T2, progress=PROGRESS),
    UnitHeard(
        host="spark1",
        unit="vllm.service",
        event="crash_loop",
        line="vllm.service failed: status=127, 2 restarts (exit-code)",
        message="vllm.service: Failed with result 'exit-code'.",
        verdict="ignored: remediating",
        judged=False,
        lines=("/bin/bash: /opt/x.sh: No such file or directory", "Failed."),
        result="exit-code",
        exit_status=127,
        n_restarts=2,
        source="poll",
        cursor="s=1;i=2",
        count=4,
        last_at=T2,
        last_line="vllm.service failed: status=127, 3 restarts (exit-code)",
    ),
    Evidence(
        evidence_id="port",
        collector="listeners",
        scope="vllm-m.service@spark1",
        error="ssh: timed out",
        facts={
            "count": 2,
            "pids": [41, 42],
            "ok": True,
            "ratio": 0.5,
            "gone": None,
            "by_pid": {"41": ["VLLM::Worker_TP0", 1]},
        },
        commands=(RAN, SENT),
        params={"port": 8000, "units": ["vllm.service"], "since": None},
    ),
    Settled(
        scope="vllm-qwen.service@spark1",
        host="spark1",
        unit="vllm-qwen.service",
        outcome="exited",
        before="signal 9, activating/auto-restart",
        after="inactive/dead",
        waited_s=3.62,
        bound_s=36.0,
        waited_for="exit",
    ),
    Diagnosis(
        endpoint="m",
        state="down",
        rule="stale-listener",
        title="old vLLM workers hold the port",
        scopes=("vllm-m.service@spark1", "vllm-m.service@spark2"),
        facts={"vllm-m.service@spark1": {"port.count": 1, "port.pids": [41]}, "x": {}},
        lines=("rule stale-listener: matched", "rule revive: not tried"),
    ),
    AttemptStarted(attempt=3, rule="manual-restart", actor="@op"),
    AttemptFinished(attempt=3, rule="slow-fix", outcome="interrupted", why="deposed"),
    StepStarted(index=2, action="restart_units", target="ds4"),
    StepRan(
        index=1,
        action="kill_processes",
        target="spark1",
        ok=True,
        planned=True,
        result="would kill 1 process",
        needs_person="a person must reseat the card",
        commands=(SENT,),
    ),
    UnitsLeft(
        attempt=4,
        rule="hung-engine",
        units=(LEFT, dataclasses.replace(LEFT, host="spark2", pid=77)),
        verified=False,
        error="systemctl start vllm.service on spark1 failed: exit 1",
    ),
    Verification(rule="revive", ok=True, within_s=10.5, ttft_s=0.41, tok_s=38.2),
    Escalation(why="budget spent", rule="revive", runbook="runbooks/revive.md", dry_run=True),
    Silenced(actor=OP, target="ds*", until=T2, why="driver upgrade", silence=3),
    Unsilenced(actor=Actor(who="alice", via=Via.CLI), target="ds*", why="done", silences=(3, 4)),
    Paused(who="@op", why="maintenance window", until=T2, endpoint="ds4"),
    Resumed(who="@op", why="window over", endpoint="ds4"),
    Acked(who="@op", via="Telegram", why="on it"),
    Notification(channel="telegram", message="opened", chat_id=-1001, outbox_id=7),
    Note(text="repair runner failed: RuntimeError('x')"),
    Legacy(old_kind="decision", text="a sentence of 2025", data={"x": 1, "l": [1, None]}),
    Decision(
        outcome=Outcome.HOSTS_BUSY,
        rule="revive",
        budget="attempt 1 of 2 for revive in 1h",
        plan=("shell on forge: touch /x", "restart_units on ds4"),
        actor="alice",
        why="a repair is running",
        state="down",
        holders={"spark1": "ds4", "spark2": "qwen"},
    ),
)

#: Records at the edges: states an endpoint and a host share (equal as strings), a whole number
#: in a float field, an `Actor` written before its `via` was kept, a command without exit status.
VARIANTS: tuple[Record, ...] = (
    Transition(  # "unknown" and "unreachable" are an endpoint's states and a host's
        source=HostState.UNKNOWN,
        dest=HostState.UNREACHABLE,
        trigger=Trigger.HOST_LOST,
        note="x",
        of_host=True,
    ),
    Transition(source=State.UNKNOWN, dest=State.UNREACHABLE, trigger=Trigger.HOST_LOST, note="x"),
    Probe(sample=dataclasses.replace(SAMPLE, latency_s=2, ttft_s=None), note="whole seconds"),
    Silenced(actor=Actor(who="alice"), target="ds4", until=T2),  # written before `via` was kept
    Verification(rule="r", ok=False, within_s=0),
    StepRan(index=0, action="shell", target="forge", ok=False, commands=(NO_EXIT,)),  # timed out
)


def _defaulted(value: object) -> Iterator[str]:
    """The fields of `value` (and of the records nested in it) left at their defaults."""
    if isinstance(value, tuple):
        for item in value:
            yield from _defaulted(item)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return
    for f in dataclasses.fields(value):
        item = getattr(value, f.name)
        if f.default is not dataclasses.MISSING and item == f.default:
            yield f"{type(value).__name__}.{f.name}"
        if f.default_factory is not dataclasses.MISSING and item == f.default_factory():
            yield f"{type(value).__name__}.{f.name}"
        yield from _defaulted(item)


def test_the_table_has_every_registered_type_once() -> None:
    assert sorted(record.tag for record in FULL) == sorted(REGISTRY)


def test_every_field_of_the_table_is_set_away_from_its_default() -> None:
    assert [name for record in FULL for name in _defaulted(record)] == []


def _nested(cls: type) -> Iterator[type]:
    """`cls` and every dataclass its fields hold, at any depth."""
    yield cls
    for tp in typing.get_type_hints(cls).values():
        for arg in (
            tp,
            *typing.get_args(tp),
            *(a for t in typing.get_args(tp) for a in typing.get_args(t)),
        ):
            if isinstance(arg, type) and dataclasses.is_dataclass(arg) and arg is not cls:
                yield from _nested(arg)


def test_a_field_that_may_be_none_is_left_out_when_it_is() -> None:
    """Every field whose default is None is a `Maybe` (pydantic leaves it out when None): a
    payload holds what was set, as the timeline has always stored it."""
    kept = sorted(
        {
            f"{cls.__name__}.{f.name}"
            for record in REGISTRY.values()
            for cls in _nested(record)
            for f in dataclasses.fields(cls)
            if f.default is None
            and not any(
                getattr(m, "exclude_if", None) is not None
                for m in getattr(
                    typing.get_type_hints(cls, include_extras=True)[f.name], "__metadata__", ()
                )
            )
        }
    )
    assert kept == []
    assert encode(NO_EXIT)["exit_status"] is None  # no default: a null, as before


@pytest.mark.parametrize("tag", sorted(REGISTRY))
def test_a_newer_version_of_a_known_type_reads_as_unknown(tag: str) -> None:
    """A row a newer release wrote (its type's version is higher than this code reads) is kept
    as it was stored: its summary shown, its payload untouched."""
    newer = REGISTRY[tag].VERSION + 1
    record = decode(tag, newer, {"anything": [1, "x"]}, kind="note", text="said by a newer one")
    assert isinstance(record, Unknown)
    assert (record.tag, record.version, record.summary, encode(record), record.problem) == (
        tag,
        newer,
        "said by a newer one",
        {"anything": [1, "x"]},
        f"{tag} version {newer} is newer than this code reads ({newer - 1})",
    )


def _stored(record: Record) -> dict[str, Any]:
    """What the store writes and reads back: the payload as JSON text (`dump_json`)."""
    loaded: dict[str, Any] = json.loads(dump_json(encode(record)))
    return loaded


@pytest.mark.parametrize("record", FULL + VARIANTS, ids=lambda r: r.tag)
def test_a_record_survives_the_stores_round_trip(record: Record) -> None:
    assert decode(record.tag, record.version, _stored(record)) == record


@pytest.mark.parametrize("record", [r for r in VARIANTS if isinstance(r, Transition)])
def test_a_stored_state_reads_as_the_subjects_kind_of_state(record: Transition) -> None:
    """An endpoint's and a host's states share values (and compare equal as strings)."""
    back = decode(record.tag, record.version, _stored(record))
    assert isinstance(back, Transition)
    assert (type(back.source), type(back.dest)) == (type(record.source), type(record.dest))


def _written_before() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(STORED.read_text())
    return loaded


@pytest.mark.parametrize("record", FULL, ids=lambda r: r.tag)
def test_the_payload_is_the_json_stored_timelines_hold(record: Record) -> None:
    stored = _written_before()[record.tag]
    assert (stored["version"], _stored(record)) == (record.version, stored["payload"])


@pytest.mark.parametrize("record", FULL, ids=lambda r: r.tag)
def test_a_payload_written_before_reads_as_its_record(record: Record) -> None:
    stored = _written_before()[record.tag]
    assert decode(record.tag, stored["version"], stored["payload"]) == record


def _drill_entries() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(DRILL.read_text())["timeline"]
    return entries


def test_a_stored_timeline_reads_whole_and_writes_back_the_same_json() -> None:
    """The drill's timeline as the daemon stored it: every entry is typed (none `Unknown`) and
    renders its stored summary; an entry at its type's current version is written back as it
    was stored (an older one is upgraded on read, its row never rewritten), plus the one field
    added since with its default (an interrupted attempt's `why`, issue 24)."""
    entries = _drill_entries()
    records = [decode(e["type"], e["version"], e["data"], kind=e["kind"]) for e in entries]
    assert [r.tag for r in records if isinstance(r, Unknown)] == []
    assert [r.summary for r in records] == [e["summary"] for e in entries]
    current = [(r, e) for r, e in zip(records, entries, strict=True) if e["version"] == r.version]
    assert len(current) == 44
    written = [_stored(r) for r, _ in current]
    assert [{k: w[k] for k in e["data"]} for w, (_, e) in zip(written, current, strict=True)] == [
        e["data"] for _, e in current
    ]
    added = {
        (r.tag, k)
        for w, (r, e) in zip(written, current, strict=True)
        for k in w.keys() - e["data"].keys()
    }
    assert added == {("attempt_finished", "why")}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Window:
    """A value with fixed-length tuples (no record has one yet): each item has its own type."""

    pair: tuple[int, str]
    one: tuple[Via]
    bounds: tuple[float, bool, str | None]


def test_a_fixed_length_tuple_reads_item_by_item() -> None:
    window = Window(pair=(7, "seven"), one=(Via.WEB,), bounds=(0.5, True, None))
    stored = json.loads(json.dumps(encode(window)))
    assert stored == {"pair": [7, "seven"], "one": ["web"], "bounds": [0.5, True, None]}
    assert decode_value(Window, stored) == window
    assert decode_value(tuple[int, str], [7, "seven"]) == (7, "seven")


@pytest.mark.parametrize(
    ("tp", "value", "problem"),
    [
        (tuple[int, str], [7], "1: Field required"),
        (
            tuple[int, str],
            [7, "seven", 8],
            "Tuple should have at most 2 items after validation, not 3",
        ),
        (tuple[int, str], [7, 8], "1: Input should be a valid string"),
        (tuple[Via], ["fax"], "0: Input should be 'telegram', 'cli', 'http' or 'web'"),
    ],
)
def test_a_fixed_length_tuple_that_does_not_fit_is_refused(
    tp: type[tuple[Any, ...]], value: list[object], problem: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        decode_value(tp, value)
    assert [
        f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else e["msg"]
        for e in refused.value.errors()
    ] == [problem]


INT, BOOL, NUMBER = (f"Input should be a valid {kind}" for kind in ("integer", "boolean", "number"))


@pytest.mark.parametrize(
    ("tag", "payload", "problem"),
    [  # read strictly, as before pydantic: no number from a string, no bool from a number
        ("attempt_started", {"attempt": "3", "rule": "r"}, f"attempt: {INT}"),
        ("attempt_started", {"attempt": 3.5, "rule": "r"}, f"attempt: {INT}"),
        ("step_started", {"index": True, "action": "a", "target": "t"}, f"index: {INT}"),
        ("verification", {"rule": "r", "ok": 1, "within_s": 1}, f"ok: {BOOL}"),
        ("verification", {"rule": "r", "ok": True, "within_s": "1"}, f"within_s: {NUMBER}"),
        ("note", {"text": None}, "text: Input should be a valid string"),
        (
            "unsilenced",
            {"actor": {"who": "a"}, "target": "t", "silences": "3"},
            "silences: Input should be a valid array",
        ),
    ],
)
def test_a_payload_read_strictly_or_not_at_all(
    tag: str, payload: dict[str, JSONValue], problem: str
) -> None:
    record = decode(tag, 1, payload, kind="note", text="as stored")
    assert isinstance(record, Unknown)
    assert (record.problem, record.summary, encode(record)) == (
        f"{tag}: {problem}",
        "as stored",
        payload,
    )


def test_a_whole_number_reads_as_a_float() -> None:
    record = decode("verification", 1, {"rule": "r", "ok": True, "within_s": 10})
    assert record == Verification(rule="r", ok=True, within_s=10.0)
