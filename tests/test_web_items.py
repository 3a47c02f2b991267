"""What the fleet page shows for each typed timeline record (read by its fields, never parsed from
the summary), its sparklines and its relative times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from supervisor.judge.machine import State, Trigger
from supervisor.record.store.records import TimelineRow
from supervisor.record.timeline.base import Record
from supervisor.record.timeline.control import Acked, Notification
from supervisor.record.timeline.parts import CommandRun, ProbeSample, UnitLeft
from supervisor.record.timeline.repair import Diagnosis, StepRan, UnitsLeft, Verification
from supervisor.record.timeline.state import Probe, Transition
from supervisor.tell.web.page.app import ago_span
from supervisor.tell.web.page.items import StepCommand, item
from supervisor.tell.web.page.spark import sparkline

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SAMPLE = ProbeSample(
    at=T0, tier="deep", check="completion", outcome="fail", reason="connection refused"
)
RUN = CommandRun(
    host="spark1",
    command="systemctl restart vllm",
    exit_status=0,
    duration_s=1.234,
    output_tail="done",
)


def _row(record: Record) -> TimelineRow:
    return TimelineRow.of(record, id=1, incident_id=7, at=T0, subject="ds4")


@pytest.mark.parametrize(
    ("record", "headline", "facts", "commands"),
    [
        (
            Transition(
                source=State.HEALTHY,
                dest=State.DOWN,
                trigger=Trigger.DOWN,
                note="refused",
                probe=SAMPLE,
            ),
            "healthy → down: refused",
            [
                ("trigger", "confirm_down"),
                ("tier", "deep"),
                ("check", "completion"),
                ("outcome", "fail"),
                ("reason", "connection refused"),
                ("latency", "0.000s"),
            ],
            [],
        ),
        (
            Diagnosis(
                endpoint="ds4",
                state="down",
                rule="stale-listener",
                title="old workers hold the port",
                scopes=("ds4",),
                facts={"ds4": {"port.holder": "python3", "unit.count": 1}},
            ),
            "diagnosis: stale-listener — old workers hold the port",
            [("ds4: port.holder", "python3"), ("ds4: unit.count", "1")],
            [],
        ),
        (
            Diagnosis(endpoint="ds4", state="down"),
            "diagnosis: no rule matched (down)",
            [],
            [],
        ),
        (
            StepRan(
                index=0,
                action="restart_units",
                target="spark1",
                ok=True,
                result="restarted vllm",
                commands=(RUN,),
            ),
            "step 1 restart_units on spark1: ok",
            [("result", "restarted vllm")],
            [
                StepCommand(
                    host="spark1",
                    command="systemctl restart vllm",
                    exit_status="0",
                    duration="1.23s",
                    output_tail="done",
                )
            ],
        ),
        (
            StepRan(
                index=1,
                action="shell",
                target="spark1",
                ok=False,
                commands=(
                    CommandRun(
                        host="spark1",
                        command="x",
                        exit_status=None,
                        duration_s=30,
                        error="timed out",
                    ),
                ),
            ),
            "step 2 shell on spark1: failed",
            [],
            [
                StepCommand(
                    host="spark1",
                    command="x",
                    exit_status="timed out",
                    duration="30.00s",
                    output_tail="",
                )
            ],
        ),
        (
            UnitsLeft(
                attempt=7,
                rule="hung-engine",
                units=(
                    UnitLeft(
                        host="spark1",
                        unit="vllm-qwen.service",
                        found="active/running",
                        after_steps="failed/failed",
                        left="active/running",
                        pid=4242,
                        started=True,
                    ),
                ),
                verified=True,
            ),
            "units left by attempt 7 (hung-engine)",
            [
                (
                    "vllm-qwen.service@spark1",
                    "found active/running, after the steps failed/failed, started again: "
                    "active/running (pid 4242)",
                ),
                ("serves again", "yes"),
            ],
            [],
        ),
        (
            Verification(rule="r", ok=True, within_s=60, ttft_s=0.25, tok_s=41.0),
            "verification passed: r",
            [("within", "60s"), ("TTFT", "0.250s"), ("tok/s", "41.0")],
            [],
        ),
        (
            Notification(channel="telegram", message="opened", chat_id=-100, outbox_id=3),
            "message sent: opened",
            [("channel", "telegram"), ("chat", "-100")],
            [],
        ),
        (Probe(sample=SAMPLE, note="failed; down"), "probe fail: failed; down", None, []),
        (
            Acked(who="ann", via="the fleet page"),
            "acknowledged by ann on the fleet page: no more reminders",
            [],
            [],
        ),
    ],
)
def test_each_record_is_read_by_its_fields(
    record: Record,
    headline: str,
    facts: list[tuple[str, str]] | None,
    commands: list[StepCommand],
) -> None:
    shown = item(_row(record))
    assert shown.headline == headline
    if facts is not None:
        assert list(shown.facts) == facts
    assert list(shown.commands) == commands


def test_a_sparkline_needs_two_points_and_scales_to_its_range() -> None:
    assert sparkline([], label="x") == ""
    assert sparkline([3.0], label="x") == ""
    svg = sparkline([1.0, 3.0, 2.0], label="a<b")
    assert 'points="0.0,17.0 40.0,1.0 80.0,9.0"' in svg
    assert "<title>a&lt;b: 2 (min 1, max 3)</title>" in svg


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (61, "1m 1s"), (3600, "1h 0m"), (90061, "1d 1h"), (-5, "0s")],
)
def test_how_long_ago(seconds: int, text: str) -> None:
    assert ago_span(T0 - timedelta(seconds=seconds), T0) == text
    assert ago_span(None, T0) == "–"
