"""Escalated is not deaf, bounded: which evidence heard while escalated is decisive (new in the
incident), and how many times an escalated endpoint may look again."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import cast

from supervisor.core.events import UnitSignal
from supervisor.judge.machine import State
from supervisor.judge.progress.judge import Progress, ProgressVerdict
from supervisor.repair.listening import MAX_LOOKS, Listening
from supervisor.worker import EndpointRecord, Heard, progress_heard, unit_heard

DEATH = UnitSignal(
    endpoint="qwen",
    host="spark1",
    unit="vllm-qwen.service",
    kind="failed",
    down=True,
    line="vllm-qwen.service failed: status=1 (exit-code)",
    message="vllm-qwen.service: Failed with result 'exit-code'.",
    at=datetime(2026, 11, 26, 13, 0, tzinfo=UTC),
    result="exit-code",
    exit_status=1,
)


@dataclass
class Endpoint:
    """What `Listening` reads of a worker's record."""

    name: str = "qwen"
    incident_id: int | None = 7
    last_unit_signal: UnitSignal | None = DEATH
    last_progress: None = None


def worker(endpoint: Endpoint) -> EndpointRecord:
    return cast(EndpointRecord, endpoint)


def test_what_was_known_at_the_escalation_is_not_new() -> None:
    listening = Listening()
    endpoint = Endpoint()
    listening.escalated(worker(endpoint), "unknown-failure", was=State.DOWN)
    assert listening.decisive(worker(endpoint), unit_heard(DEATH)) is None
    loop = unit_heard(replace(DEATH, kind="crash_loop", n_restarts=2))
    memory = listening.decisive(worker(endpoint), loop)
    assert memory is not None
    assert (memory.rule, memory.state, memory.looks) == ("unknown-failure", State.DOWN, 1)
    assert listening.decisive(worker(endpoint), loop) is None  # the loop goes on: heard once


def test_new_exit_statuses_are_decisive_up_to_the_bound() -> None:
    listening = Listening()
    endpoint = Endpoint()
    listening.escalated(worker(endpoint), None, was=State.DEGRADED)
    looks = []
    for status in (2, 3, 4, 5):
        memory = listening.decisive(
            worker(endpoint), unit_heard(replace(DEATH, exit_status=status))
        )
        looks.append(memory.looks if memory else None)
        assert memory is None or memory.state is State.DEGRADED
    assert looks == [1, 2, 3, None]
    assert MAX_LOOKS == 3


def test_another_incident_or_no_escalation_hears_nothing() -> None:
    listening = Listening()
    endpoint = Endpoint()
    new = Heard(key="metrics: hung", words="/metrics: hung")
    assert listening.decisive(worker(endpoint), new) is None  # never escalated here
    listening.escalated(worker(endpoint), "r", was=State.DOWN)
    endpoint.incident_id = 8
    assert listening.decisive(worker(endpoint), new) is None


def test_no_signal_from_metrics_is_not_new_when_none_was_read_before() -> None:
    """`/metrics` unreadable (`unknown`) after an escalation made before any verdict: nothing
    new (whether the first read came before the escalation or after is timing); a real verdict
    is."""
    listening = Listening()
    endpoint = Endpoint()
    listening.escalated(worker(endpoint), "always", was=State.DOWN)
    unread = Progress(verdict=ProgressVerdict.UNKNOWN, reason="no metrics (cannot reach it)")
    assert listening.decisive(worker(endpoint), progress_heard(unread)) is None
    hung = Progress(verdict=ProgressVerdict.HUNG, reason="tokens frozen for 10 min")
    memory = listening.decisive(worker(endpoint), progress_heard(hung))
    assert memory is not None
    assert memory.looks == 1
