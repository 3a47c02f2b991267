"""How probe results become triggers: streak counting, confirmation and startup grace.

A pure function of (state, streaks, result, settings, time), so every rule is a table row in the
tests. The rules:

- A failure is confirmed by `failures_to_down` consecutive failures, then one immediate re-probe
  of the same tier that fails too. A liveness pass clears a streak of liveness failures, but not
  one that holds a failed completion: vLLM answers `/health` while its engine is hung, so only a
  deep pass vouches for a failed completion.
- Degradation (no reasoning text, tok/s under the baseline ratio) is confirmed by
  `degraded_after` consecutive degraded completions; each one short of that is re-probed at once.
- Inside the startup grace failures are recorded and never counted.
- On demand (Ollama, a llama-swap router): a real check in a calm state finds the model not
  loaded and does not load it: `idle` (the server answered; streaks cleared). Only a real check
  of a loaded model (or one that may load: a repair's proof, a person's `probe`) leaves it.
- In `remediating` and `maintenance` results are recorded and change nothing; `escalated`,
  `verifying` and `unreachable` are left only by a passing real check.
- An endpoint that is not healthy and passes a liveness check gets a real check at once, so a
  recovery is confirmed in seconds, not at the next completion interval (the worker lets a
  liveness pass do that once per state, see `supervisor.worker.ProbeDiscipline`).
- A unit's death that systemd reported (`supervisor.hear.streams`) plus one failed probe is down at
  once, whatever `failures_to_down` and the startup grace say: a dead process is not loading
  (`judge_unit_death`). Events are not judged in maintenance, remediating or verifying: the
  daemon's own stops and restarts look the same.
- Progress, not just answers: before a failed or degraded real check counts, the worker reads
  what the server is doing (`supervisor.judge.progress`, two reads of `/metrics`) and hands it here.
  **busy** (tokens flowing, requests queued) is load: `busy`, streaks cleared, no re-probe,
  never down. **hung** (requests running, the token counter frozen) is down at once, startup
  grace or not. idle and unknown change nothing: the result counts as above, so a server with
  no signal (mlx_lm, Ollama, a health URL) is down only after `failures_to_down` failed checks
  in a row and a failed re-probe: a single timeout never counts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from supervisor.core.durations import format_duration
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.judge.machine import State, Trigger
from supervisor.judge.progress.judge import Progress
from supervisor.judge.progress.judge import ProgressVerdict as Seen
from supervisor.probe.completion import NO_REASONING

_FROZEN = frozenset({State.REMEDIATING, State.MAINTENANCE})
_ONLY_A_PASS_LEAVES = frozenset({State.ESCALATED, State.VERIFYING, State.UNREACHABLE})
#: where a failed or slow real check first asks what the server is doing
_ASKS_PROGRESS = frozenset(
    {State.UNKNOWN, State.STARTING, State.HEALTHY, State.IDLE, State.DEGRADED, State.BUSY}
)
#: where a liveness pass does not bring a real check forward (nothing to confirm; busy: no
#: extra load beyond the schedule)
_SETTLED = frozenset({State.HEALTHY, State.IDLE, State.DEGRADED, State.BUSY})
#: where a model found not loaded makes an endpoint that loads on demand `idle`
_MAY_IDLE = frozenset({State.UNKNOWN, State.STARTING, State.HEALTHY})


def wants_progress(state: State, result: ProbeResult) -> bool:
    """Read the server's progress before judging `result`: a real check that failed or was slow,
    in a state where load may explain it."""
    if result.tier is not Tier.DEEP or state not in _ASKS_PROGRESS:
        return False
    slow = result.outcome is ProbeOutcome.DEGRADED and result.reason != NO_REASONING
    return result.outcome is ProbeOutcome.FAIL or slow


@dataclass(frozen=True, kw_only=True)
class Streaks:
    fail: int = 0  #: consecutive failed probes
    deep_fail: bool = False  #: the failure streak holds a failed real check
    degraded: int = 0  #: consecutive degraded real checks


@dataclass(frozen=True, kw_only=True)
class Limits:
    failures_to_down: int
    degraded_after: int


@dataclass(frozen=True, kw_only=True)
class Judgement:
    trigger: Trigger | None  #: what to fire, if anything
    streaks: Streaks  #: the counters after this result
    reprobe: Tier | None  #: probe again at once, at this tier
    note: str  #: why, in one plain line (recorded as a decision)


def judge(
    *,
    state: State,
    streaks: Streaks,
    result: ProbeResult,
    is_reprobe: bool,
    limits: Limits,
    grace_until: datetime | None,
    now: datetime,
    progress: Progress | None = None,
) -> Judgement:
    """`progress`: what the server was doing, read when `wants_progress` said so."""
    if progress is not None and wants_progress(state, result):
        seen = _on_progress(state, streaks, result, progress)
        if seen is not None:
            return seen
    if result.outcome is ProbeOutcome.OK:
        return _on_pass(state, streaks, result)
    if result.outcome is ProbeOutcome.IDLE:
        return _on_idle(state)
    if result.outcome is ProbeOutcome.DEGRADED:
        return _on_degraded(state, streaks, result, is_reprobe, limits)
    return _on_fail(state, streaks, result, is_reprobe, limits, grace_until, now)


def _on_progress(
    state: State, streaks: Streaks, result: ProbeResult, progress: Progress
) -> Judgement | None:
    """busy: load, not counted; hung: down at once; anything else: None (judged as usual)."""
    if progress.verdict is Seen.BUSY:
        if state is State.BUSY:
            return Judgement(
                trigger=None,
                streaks=Streaks(),
                reprobe=None,
                note=f"not counted: {progress.reason}",
            )
        return Judgement(
            trigger=Trigger.BUSY, streaks=Streaks(), reprobe=None, note=progress.reason
        )
    if progress.verdict is Seen.HUNG:
        counted = Streaks(fail=streaks.fail + 1, deep_fail=True, degraded=streaks.degraded)
        note = f"{progress.reason}; real check: {result.reason}"
        return Judgement(trigger=Trigger.DOWN, streaks=counted, reprobe=None, note=note)
    return None


def _on_idle(state: State) -> Judgement:
    """The server answered and its model is not loaded (the probe did not load it): `idle`,
    streaks cleared; elsewhere (only the calm states probe without loading) nothing changes."""
    if state in _MAY_IDLE:
        return Judgement(trigger=Trigger.IDLE, streaks=Streaks(), reprobe=None, note="not loaded")
    note = "not loaded" if state is State.IDLE else f"not loaded; {state}"
    return Judgement(trigger=None, streaks=Streaks(), reprobe=None, note=note)


def _on_pass(state: State, streaks: Streaks, result: ProbeResult) -> Judgement:
    if result.tier is Tier.DEEP:
        cleared = Streaks()
        if state in _FROZEN:
            return Judgement(trigger=None, streaks=cleared, reprobe=None, note=f"passed; {state}")
        if state is State.HEALTHY:
            return Judgement(trigger=None, streaks=cleared, reprobe=None, note="passed")
        return Judgement(
            trigger=Trigger.PASS, streaks=cleared, reprobe=None, note="real check passed"
        )
    kept = streaks if streaks.deep_fail else replace(streaks, fail=0)
    if state in _FROZEN or state in _SETTLED:
        return Judgement(trigger=None, streaks=kept, reprobe=None, note="liveness passed")
    return Judgement(
        trigger=None,
        streaks=kept,
        reprobe=Tier.DEEP,
        note=f"liveness passed while {state}: real check now",
    )


def _on_degraded(
    state: State, streaks: Streaks, result: ProbeResult, is_reprobe: bool, limits: Limits
) -> Judgement:
    counted = Streaks(fail=0, deep_fail=False, degraded=streaks.degraded + 1)
    if state in _FROZEN or state in _ONLY_A_PASS_LEAVES or state is State.DEGRADED:
        return Judgement(trigger=None, streaks=counted, reprobe=None, note=f"degraded; {state}")
    if counted.degraded >= limits.degraded_after:
        return Judgement(
            trigger=Trigger.DEGRADE,
            streaks=counted,
            reprobe=None,
            note=f"degraded {counted.degraded} times in a row: {result.reason}",
        )
    return Judgement(
        trigger=None,
        streaks=counted,
        reprobe=None if is_reprobe else Tier.DEEP,
        note=f"degraded ({counted.degraded}/{limits.degraded_after}): {result.reason}",
    )


def _on_fail(
    state: State,
    streaks: Streaks,
    result: ProbeResult,
    is_reprobe: bool,
    limits: Limits,
    grace_until: datetime | None,
    now: datetime,
) -> Judgement:
    counted = Streaks(
        fail=streaks.fail + 1,
        deep_fail=streaks.deep_fail or result.tier is Tier.DEEP,
        degraded=streaks.degraded,
    )
    in_grace = grace_until is not None and now < grace_until
    if state in _FROZEN or state in _ONLY_A_PASS_LEAVES or state is State.DOWN:
        return Judgement(trigger=None, streaks=counted, reprobe=None, note=f"failed; {state}")
    if in_grace and state in (State.UNKNOWN, State.STARTING):
        assert grace_until is not None
        left = format_duration(grace_until - now)
        trigger = Trigger.GRACE if state is State.UNKNOWN else None
        return Judgement(
            trigger=trigger,
            streaks=Streaks(),
            reprobe=None,
            note=f"not counted: inside startup grace ({left} left): {result.reason}",
        )
    if counted.fail < limits.failures_to_down:
        return Judgement(
            trigger=None,
            streaks=counted,
            reprobe=None,
            note=f"failed ({counted.fail}/{limits.failures_to_down}): {result.reason}",
        )
    if not is_reprobe:
        return Judgement(
            trigger=None,
            streaks=counted,
            reprobe=result.tier,
            note=f"failed {counted.fail} times: re-probing to confirm",
        )
    return Judgement(
        trigger=Trigger.DOWN,
        streaks=counted,
        reprobe=None,
        note=f"{result.reason} ({counted.fail - 1} failures and a failed re-probe)",
    )


#: where a unit event is not judged: the daemon's own stops and restarts look the same
EVENT_IGNORED = frozenset({State.MAINTENANCE, State.REMEDIATING, State.VERIFYING})
#: where a unit's death and one failed probe are down at once
_EVENT_DOWN_FROM = frozenset(
    {State.UNKNOWN, State.STARTING, State.HEALTHY, State.DEGRADED, State.BUSY}
)


def unit_death_verdict(state: State, result: ProbeResult) -> str:
    """What one probe right after a unit's death makes of it, in words."""
    if result.ok:
        return "probe passes"
    if state in _EVENT_DOWN_FROM:
        return f"probe confirms: {result.reason}"
    return f"failed; {state}"


def judge_unit_death(
    *, state: State, streaks: Streaks, result: ProbeResult, line: str
) -> Judgement:
    """systemd said a unit died (`line`) and one probe ran at once (`result`)."""
    note = f"systemd: {line}; {unit_death_verdict(state, result)}"
    if result.ok:
        return Judgement(trigger=None, streaks=streaks, reprobe=None, note=note)
    counted = Streaks(
        fail=streaks.fail + 1,
        deep_fail=streaks.deep_fail or result.tier is Tier.DEEP,
        degraded=streaks.degraded,
    )
    trigger = Trigger.DOWN if state in _EVENT_DOWN_FROM else None
    return Judgement(trigger=trigger, streaks=counted, reprobe=None, note=note)
