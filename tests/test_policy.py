"""How probe results become triggers: the counting rules, one table row each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.judge.machine import State, Trigger
from supervisor.judge.policy import Judgement, Limits, Streaks, judge, wants_progress
from supervisor.judge.progress.judge import Progress
from supervisor.judge.progress.judge import ProgressVerdict as Seen

NOW = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
LIMITS = Limits(failures_to_down=3, degraded_after=2)
L, D = Tier.LIVENESS, Tier.DEEP
OK, DEG, FAIL = ProbeOutcome.OK, ProbeOutcome.DEGRADED, ProbeOutcome.FAIL
UNLOADED = ProbeOutcome.IDLE
S, T = State, Trigger


def result(tier: Tier, outcome: ProbeOutcome, reason: str = "") -> ProbeResult:
    return ProbeResult(
        endpoint="ds4",
        tier=tier,
        check="completion" if tier is D else "health",
        outcome=outcome,
        reason=reason or ("" if outcome is OK else "connection refused"),
        at=NOW,
        latency_s=0.1,
    )


@dataclass(frozen=True)
class Case:
    id: str
    state: State
    streaks: Streaks
    tier: Tier
    outcome: ProbeOutcome
    expect_trigger: Trigger | None
    expect_streaks: Streaks
    expect_reprobe: Tier | None
    expect_note: str
    is_reprobe: bool = False
    grace_until: datetime | None = None
    reason: str = ""


CLEARED = (Streaks(), None, "not loaded")  #: streaks cleared, no re-probe, the note
CASES = [
    # passing
    Case(
        "deep pass heals down",
        S.DOWN,
        Streaks(fail=5, deep_fail=True),
        D,
        OK,
        T.PASS,
        Streaks(),
        None,
        "real check passed",
    ),
    Case(
        "deep pass keeps healthy",
        S.HEALTHY,
        Streaks(degraded=1),
        D,
        OK,
        None,
        Streaks(),
        None,
        "passed",
    ),
    Case(
        "deep pass during a repair changes nothing",
        S.REMEDIATING,
        Streaks(fail=2),
        D,
        OK,
        None,
        Streaks(),
        None,
        "passed; remediating",
    ),
    Case(
        "deep pass ends escalation",
        S.ESCALATED,
        Streaks(fail=9),
        D,
        OK,
        T.PASS,
        Streaks(),
        None,
        "real check passed",
    ),
    Case(
        "liveness pass clears liveness failures",
        S.HEALTHY,
        Streaks(fail=2),
        L,
        OK,
        None,
        Streaks(),
        None,
        "liveness passed",
    ),
    Case(
        "liveness pass does not vouch for a failed completion",
        S.HEALTHY,
        Streaks(fail=2, deep_fail=True),
        L,
        OK,
        None,
        Streaks(fail=2, deep_fail=True),
        None,
        "liveness passed",
    ),
    Case(
        "liveness pass while down asks for a real check",
        S.DOWN,
        Streaks(fail=4),
        L,
        OK,
        None,
        Streaks(),
        D,
        "liveness passed while down: real check now",
    ),
    Case(
        "liveness pass while unknown asks for a real check",
        S.UNKNOWN,
        Streaks(),
        L,
        OK,
        None,
        Streaks(),
        D,
        "liveness passed while unknown: real check now",
    ),
    Case(
        "liveness pass in maintenance does nothing",
        S.MAINTENANCE,
        Streaks(),
        L,
        OK,
        None,
        Streaks(),
        None,
        "liveness passed",
    ),
    # failing
    Case(
        "first failure counts",
        S.HEALTHY,
        Streaks(),
        L,
        FAIL,
        None,
        Streaks(fail=1),
        None,
        "failed (1/3): connection refused",
    ),
    Case(
        "third failure asks for a re-probe",
        S.HEALTHY,
        Streaks(fail=2),
        L,
        FAIL,
        None,
        Streaks(fail=3),
        L,
        "failed 3 times: re-probing to confirm",
    ),
    Case(
        "failed re-probe confirms down",
        S.HEALTHY,
        Streaks(fail=3),
        L,
        FAIL,
        T.DOWN,
        Streaks(fail=4),
        None,
        "connection refused (3 failures and a failed re-probe)",
        is_reprobe=True,
    ),
    Case(
        "a re-probe short of the threshold does not confirm",
        S.HEALTHY,
        Streaks(fail=0),
        D,
        FAIL,
        None,
        Streaks(fail=1, deep_fail=True),
        None,
        "failed (1/3): HTTP 500",
        is_reprobe=True,
        reason="HTTP 500",
    ),
    Case(
        "failed completions count past liveness passes",
        S.HEALTHY,
        Streaks(fail=2, deep_fail=True),
        D,
        FAIL,
        None,
        Streaks(fail=3, deep_fail=True),
        D,
        "failed 3 times: re-probing to confirm",
    ),
    Case(
        "degraded endpoint can go down",
        S.DEGRADED,
        Streaks(fail=3),
        L,
        FAIL,
        T.DOWN,
        Streaks(fail=4),
        None,
        "connection refused (3 failures and a failed re-probe)",
        is_reprobe=True,
    ),
    Case(
        "down stays down",
        S.DOWN,
        Streaks(fail=7),
        L,
        FAIL,
        None,
        Streaks(fail=8),
        None,
        "failed; down",
    ),
    Case(
        "escalated is left alone",
        S.ESCALATED,
        Streaks(fail=7),
        L,
        FAIL,
        None,
        Streaks(fail=8),
        None,
        "failed; escalated",
    ),
    Case(
        "unreachable is left alone",
        S.UNREACHABLE,
        Streaks(),
        L,
        FAIL,
        None,
        Streaks(fail=1),
        None,
        "failed; unreachable",
    ),
    Case(
        "maintenance is left alone",
        S.MAINTENANCE,
        Streaks(fail=5),
        D,
        FAIL,
        None,
        Streaks(fail=6, deep_fail=True),
        None,
        "failed; maintenance",
    ),
    # startup grace
    Case(
        "unknown failing inside grace starts the grace",
        S.UNKNOWN,
        Streaks(),
        L,
        FAIL,
        T.GRACE,
        Streaks(),
        None,
        "not counted: inside startup grace (9m left): connection refused",
        grace_until=NOW + timedelta(minutes=9),
    ),
    Case(
        "starting failing inside grace is not counted",
        S.STARTING,
        Streaks(),
        L,
        FAIL,
        None,
        Streaks(),
        None,
        "not counted: inside startup grace (30s left): connection refused",
        grace_until=NOW + timedelta(seconds=30),
    ),
    Case(
        "starting after the grace counts",
        S.STARTING,
        Streaks(fail=2),
        L,
        FAIL,
        None,
        Streaks(fail=3),
        L,
        "failed 3 times: re-probing to confirm",
        grace_until=NOW - timedelta(seconds=1),
    ),
    Case(
        "unknown without grace counts",
        S.UNKNOWN,
        Streaks(fail=3),
        L,
        FAIL,
        T.DOWN,
        Streaks(fail=4),
        None,
        "connection refused (3 failures and a failed re-probe)",
        is_reprobe=True,
    ),
    # degraded
    Case(
        "first degraded completion is re-probed",
        S.HEALTHY,
        Streaks(),
        D,
        DEG,
        None,
        Streaks(degraded=1),
        D,
        "degraded (1/2): no reasoning text",
        reason="no reasoning text",
    ),
    Case(
        "second degraded completion confirms",
        S.HEALTHY,
        Streaks(degraded=1),
        D,
        DEG,
        T.DEGRADE,
        Streaks(degraded=2),
        None,
        "degraded 2 times in a row: no reasoning text",
        is_reprobe=True,
        reason="no reasoning text",
    ),
    Case(
        "a degraded re-probe short of the threshold is not re-probed again",
        S.HEALTHY,
        Streaks(),
        D,
        DEG,
        None,
        Streaks(degraded=1),
        None,
        "degraded (1/2): slow",
        is_reprobe=True,
        reason="slow",
    ),
    Case(
        "down that answers degraded becomes degraded",
        S.DOWN,
        Streaks(fail=6, degraded=1),
        D,
        DEG,
        T.DEGRADE,
        Streaks(degraded=2),
        None,
        "degraded 2 times in a row: slow",
        reason="slow",
    ),
    Case(
        "degraded stays degraded",
        S.DEGRADED,
        Streaks(degraded=4),
        D,
        DEG,
        None,
        Streaks(degraded=5),
        None,
        "degraded; degraded",
        reason="slow",
    ),
    Case(
        "degraded during verification waits for a pass",
        S.VERIFYING,
        Streaks(),
        D,
        DEG,
        None,
        Streaks(degraded=1),
        None,
        "degraded; verifying",
        reason="slow",
    ),
    # on demand: a real check that found the model not loaded and left it so
    *[
        Case(
            f"not loaded makes {state} idle", state, Streaks(fail=1), D, UNLOADED, T.IDLE, *CLEARED
        )
        for state in (S.UNKNOWN, S.STARTING, S.HEALTHY)
    ],
    Case("idle stays idle", S.IDLE, Streaks(), D, UNLOADED, None, *CLEARED),
    Case(
        "not loaded never ends a problem",
        S.DOWN,
        Streaks(fail=3, deep_fail=True),
        D,
        UNLOADED,
        None,
        Streaks(),
        None,
        "not loaded; down",
    ),
    Case(
        "a loaded model's pass ends idle",
        S.IDLE,
        Streaks(),
        D,
        OK,
        T.PASS,
        Streaks(),
        None,
        "real check passed",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_judge(case: Case) -> None:
    verdict = judge(
        state=case.state,
        streaks=case.streaks,
        result=result(case.tier, case.outcome, case.reason),
        is_reprobe=case.is_reprobe,
        limits=LIMITS,
        grace_until=case.grace_until,
        now=NOW,
    )
    assert verdict == Judgement(
        trigger=case.expect_trigger,
        streaks=case.expect_streaks,
        reprobe=case.expect_reprobe,
        note=case.expect_note,
    )


def test_a_whole_outage_needs_threshold_failures_plus_a_reprobe() -> None:
    """Walk healthy -> down the way the worker does: three failures, then the re-probe."""
    streaks, state, fired = Streaks(), S.HEALTHY, []
    for is_reprobe in (False, False, False, True):
        verdict = judge(
            state=state,
            streaks=streaks,
            result=result(L, FAIL),
            is_reprobe=is_reprobe,
            limits=LIMITS,
            grace_until=None,
            now=NOW,
        )
        streaks = verdict.streaks
        fired.append(verdict.trigger)
    assert fired == [None, None, None, T.DOWN]


BUSY = Progress(
    verdict=Seen.BUSY,
    reason="busy: 48 running, 20 waiting, 940 tok/s generated",
    running=48,
    waiting=20,
    tok_s=940,
)
HUNG = Progress(
    verdict=Seen.HUNG,
    reason="hung: 3 running, 0 waiting, generation_tokens_total frozen at 412 for 5.0s",
    running=3,
    waiting=0,
    tok_s=0,
)
IDLE = Progress(verdict=Seen.IDLE, reason="idle: nothing running or waiting (0 tok/s generated)")
TIMEOUT = "timed out after 30s"


@dataclass(frozen=True)
class ProgressCase:
    id: str
    state: State
    tier: Tier
    outcome: ProbeOutcome
    progress: Progress
    expect: Judgement
    grace_until: datetime | None = None


PROGRESS_CASES = [
    ProgressCase(
        "a timed-out real check of a busy server is busy, not counted",
        S.HEALTHY,
        D,
        FAIL,
        BUSY,
        Judgement(trigger=T.BUSY, streaks=Streaks(), reprobe=None, note=BUSY.reason),
    ),
    ProgressCase(
        "a slow real check of a busy server is busy, not degraded, no re-probe",
        S.HEALTHY,
        D,
        DEG,
        BUSY,
        Judgement(trigger=T.BUSY, streaks=Streaks(), reprobe=None, note=BUSY.reason),
    ),
    ProgressCase(
        "still busy: nothing fires, nothing counted, no extra check",
        S.BUSY,
        D,
        FAIL,
        BUSY,
        Judgement(
            trigger=None, streaks=Streaks(), reprobe=None, note=f"not counted: {BUSY.reason}"
        ),
    ),
    ProgressCase(
        "hung is down at once, no streak, no re-probe",
        S.HEALTHY,
        D,
        FAIL,
        HUNG,
        Judgement(
            trigger=T.DOWN,
            streaks=Streaks(fail=1, deep_fail=True),
            reprobe=None,
            note=f"{HUNG.reason}; real check: {TIMEOUT}",
        ),
    ),
    ProgressCase(
        "hung is down even inside the startup grace",
        S.STARTING,
        D,
        FAIL,
        HUNG,
        Judgement(
            trigger=T.DOWN,
            streaks=Streaks(fail=1, deep_fail=True),
            reprobe=None,
            note=f"{HUNG.reason}; real check: {TIMEOUT}",
        ),
        grace_until=NOW + timedelta(minutes=5),
    ),
    ProgressCase(
        "a busy server that hangs is down",
        S.BUSY,
        D,
        FAIL,
        HUNG,
        Judgement(
            trigger=T.DOWN,
            streaks=Streaks(fail=1, deep_fail=True),
            reprobe=None,
            note=f"{HUNG.reason}; real check: {TIMEOUT}",
        ),
    ),
    ProgressCase(
        "idle: the failure counts as usual",
        S.HEALTHY,
        D,
        FAIL,
        IDLE,
        Judgement(
            trigger=None,
            streaks=Streaks(fail=1, deep_fail=True),
            reprobe=None,
            note=f"failed (1/3): {TIMEOUT}",
        ),
    ),
    ProgressCase(
        "down stays down whatever the load (only a pass leaves)",
        S.DOWN,
        D,
        FAIL,
        BUSY,
        Judgement(
            trigger=None,
            streaks=Streaks(fail=1, deep_fail=True),
            reprobe=None,
            note="failed; down",
        ),
    ),
    ProgressCase(
        "escalated: a busy read changes nothing",
        S.ESCALATED,
        D,
        FAIL,
        BUSY,
        Judgement(
            trigger=None,
            streaks=Streaks(fail=1, deep_fail=True),
            reprobe=None,
            note="failed; escalated",
        ),
    ),
    ProgressCase(
        "a liveness failure is never explained by load",
        S.HEALTHY,
        L,
        FAIL,
        BUSY,
        Judgement(
            trigger=None,
            streaks=Streaks(fail=1),
            reprobe=None,
            note=f"failed (1/3): {TIMEOUT}",
        ),
    ),
    ProgressCase(
        "busy: a liveness pass brings no real check forward",
        S.BUSY,
        L,
        OK,
        BUSY,
        Judgement(trigger=None, streaks=Streaks(), reprobe=None, note="liveness passed"),
    ),
    ProgressCase(
        "busy: a real check that passes is healthy again",
        S.BUSY,
        D,
        OK,
        BUSY,
        Judgement(trigger=T.PASS, streaks=Streaks(), reprobe=None, note="real check passed"),
    ),
]


@pytest.mark.parametrize("case", PROGRESS_CASES, ids=[c.id for c in PROGRESS_CASES])
def test_progress_decides_before_a_failure_counts(case: ProgressCase) -> None:
    reason = "" if case.outcome is OK else TIMEOUT
    verdict = judge(
        state=case.state,
        streaks=Streaks(),
        result=result(case.tier, case.outcome, reason),
        is_reprobe=False,
        limits=LIMITS,
        grace_until=case.grace_until,
        now=NOW,
        progress=case.progress,
    )
    assert verdict == case.expect


@pytest.mark.parametrize(
    ("state", "tier", "outcome", "wanted"),
    [
        (S.HEALTHY, D, FAIL, True),
        (S.HEALTHY, D, DEG, True),  # slow
        (S.BUSY, D, FAIL, True),
        (S.STARTING, D, FAIL, True),
        (S.HEALTHY, D, OK, False),
        (S.HEALTHY, L, FAIL, False),
        (S.DOWN, D, FAIL, False),
        (S.VERIFYING, D, FAIL, False),
        (S.REMEDIATING, D, FAIL, False),
    ],
)
def test_when_progress_is_read(
    state: State, tier: Tier, outcome: ProbeOutcome, wanted: bool
) -> None:
    assert wants_progress(state, result(tier, outcome, "2.0 tok/s")) is wanted


def test_no_reasoning_text_is_not_slowness() -> None:
    assert not wants_progress(S.HEALTHY, result(D, DEG, "no reasoning text"))
