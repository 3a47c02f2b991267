"""The probe discipline of an endpoint's worker: how probes run, what is read beside them, and
how their results and systemd's unit events are judged and recorded.

- A real check that failed or was slow asks what the server is doing first (`progress`, two
  reads of `/metrics`); `supervisor.judge.policy` makes busy a state of its own (never repaired) and
  hung down at once. The transition and the probe entries carry what was read.
- While down, escalated, unreachable or busy, a scheduled real check runs at most once per
  `completion_interval`; a liveness pass may bring one forward once per state (a recovery is
  still confirmed in seconds), not at every pass. Verification's own checks are the repair's.
- A unit's death plus one failed probe is down at once; a probe or a progress read in flight is
  abandoned when a host is lost (`_queue`), and the commands that arrive
  meanwhile are served.
- Identical consecutive probe results are counted into runs (`_runs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from supervisor.config.supervised import Endpoint
from supervisor.core.clock import Clock
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier, UnitSignal
from supervisor.judge.machine import FleetMachine, State, Trigger
from supervisor.judge.policy import (
    EVENT_IGNORED,
    Judgement,
    Limits,
    judge,
    judge_unit_death,
    unit_death_verdict,
    wants_progress,
)
from supervisor.judge.progress.judge import Progress
from supervisor.worker._heard import Heard, load_heard, progress_heard, unit_heard
from supervisor.worker._queue import WorkerQueue
from supervisor.worker._record import EndpointRecord


class Prober(Protocol):
    async def __call__(self, endpoint: Endpoint, tier: Tier) -> ProbeResult: ...


class ProgressReader(Protocol):
    async def __call__(self, endpoint: Endpoint) -> Progress:
        """What the endpoint's server is doing (busy, hung, idle, unknown)."""


class HostCheck(Protocol):
    async def __call__(self, endpoint: Endpoint) -> str:
        """'' when every host serving the endpoint answers now, else why one does not."""


class DependencyCheck(Protocol):
    async def __call__(self, endpoint: Endpoint, *, probe: bool = True) -> str:
        """'' when the endpoints this one is reached through answer, else which does not and
        why (`probe`: one whose own state says nothing is probed now)."""


#: states in which a scheduled real check waits a whole completion interval after the last one
_SPACED = frozenset({State.DOWN, State.ESCALATED, State.UNREACHABLE, State.BUSY})
_SLACK_S = 0.5
#: states a load that failed makes down at once (not in a startup grace: recorded only)
_LOAD_DOWN_FROM = frozenset({State.UNKNOWN, State.HEALTHY, State.IDLE, State.DEGRADED, State.BUSY})
#: states in which one failure while a router or backend is known to fail is blocked at once
_BLOCKED_AT_ONCE = frozenset({State.UNKNOWN, State.HEALTHY, State.IDLE, State.DEGRADED, State.BUSY})
#: states in which a real check of an endpoint that loads on demand never loads its model
_GENTLE = frozenset({State.UNKNOWN, State.STARTING, State.HEALTHY, State.IDLE})


class ProbeDiscipline:
    """How `record`'s endpoint is probed and judged; probes and progress reads run through
    `queue.abortable`, so commands are served meanwhile and a lost host abandons them. What is
    heard while escalated goes to `heard`."""

    def __init__(
        self,
        record: EndpointRecord,
        *,
        queue: WorkerQueue,
        machine: FleetMachine,
        prober: Prober,
        clock: Clock,
        host_check: HostCheck | None,
        progress: ProgressReader | None,
        dependency_check: DependencyCheck | None = None,
        heard: Callable[[Heard], None],
    ) -> None:
        self._record = record
        self.endpoint = record.endpoint
        self._queue = queue
        self._machine = machine
        self._clock = clock
        self._progress = progress
        self._prober = prober
        self._host_check = host_check
        self._dependency_check = dependency_check if record.endpoint.depends_on() else None
        self._heard = heard
        self._log = record.log
        self._last_deep: float | None = None  #: monotonic start of the latest real check
        self._forward_armed = True  #: a liveness pass may still bring a real check forward
        self._limits = Limits(
            failures_to_down=self.endpoint.probe.failures_to_down,
            degraded_after=self.endpoint.probe.degraded_after,
        )

    def rearm(self) -> None:
        """The state changed: a liveness pass may bring a real check forward again."""
        self._forward_armed = True

    async def probe_once(self, tier: Tier) -> ProbeResult:
        """Probe once and judge nothing (a command's probe)."""
        if tier is Tier.DEEP:
            self._last_deep = self._clock.monotonic()
        return await self._prober(self.endpoint, tier)

    def deep_not_due(self) -> bool:
        """A scheduled real check while down, escalated, unreachable or busy comes too soon after
        the last one (a liveness pass brought that one forward)."""
        if (
            self._record.state not in _SPACED
            or self._last_deep is None
            or self.endpoint.kind == "health"
        ):
            return False
        settings = self.endpoint.probe
        spacing = (settings.completion_interval - settings.jitter).total_seconds() - _SLACK_S
        return self._clock.monotonic() - self._last_deep < spacing

    def _probed(self, tier: Tier) -> Endpoint:
        """The endpoint as probed now: in a calm state the real check of one that loads on
        demand never loads its model (`idle` instead); a repair's proof may."""
        if tier is Tier.DEEP and self.endpoint.loader and self._record.state in _GENTLE:
            return self.endpoint.without_loading()
        return self.endpoint

    async def probe(self, tier: Tier, *, is_reprobe: bool) -> None:
        if tier is Tier.DEEP:
            self._last_deep = self._clock.monotonic()
        done, result = await self._queue.abortable(self._prober(self._probed(tier), tier))
        if not done or result is None:
            self._log.info("probe abandoned", tier=tier.value, why="a host was lost")
            return
        await self.on_result(result, is_reprobe=is_reprobe)

    async def _read_progress(self, result: ProbeResult) -> tuple[bool, Progress | None]:
        """What the server is doing, when the policy wants it for `result` (and, while
        escalated, after a failed real check: a changed verdict is new evidence)."""
        escalated = (
            self._record.state is State.ESCALATED and result.tier is Tier.DEEP and not result.ok
        )
        if self._progress is None or not (wants_progress(self._record.state, result) or escalated):
            return True, None
        done, progress = await self._queue.abortable(self._progress(self.endpoint))
        if progress is not None:
            self._record.last_progress = progress
            self._heard(progress_heard(progress))
        return done, progress

    async def on_result(self, result: ProbeResult, *, is_reprobe: bool) -> None:
        done, progress = await self._read_progress(result)
        if not done:
            self._log.info("progress read abandoned", why="a host was lost")
            return
        # the sample is stored with the snapshot it leads to (`record_change`, `record_probe`)
        blocked = self._record.blocked_by if self._record.state is State.UNREACHABLE else ""
        self._record.last_reason = f"blocked by {blocked}" if blocked else result.reason
        if not result.ok and result.outcome is not ProbeOutcome.IDLE:
            self._record.last_problem = result
        if result.ok:
            self._record.last_ok_at = result.at
            if result.tier is Tier.DEEP and result.ttft_s is not None:
                self._record.last_ttft_s, self._record.last_tok_s = result.ttft_s, result.tok_s
        verdict = judge(
            state=self._record.state,
            streaks=self._record.streaks,
            result=result,
            is_reprobe=is_reprobe,
            limits=self._limits,
            grace_until=self._record.grace_until,
            now=self._clock.now(),
            progress=progress,
        )
        self._record.streaks = verdict.streaks
        if verdict.trigger is Trigger.DOWN and self._host_check is not None:
            host_problem = await self._host_check(self.endpoint)
            if host_problem:
                # one cause, not N incidents: the host watcher will call it unreachable
                verdict = replace(
                    verdict, trigger=None, note=f"not confirmed: {host_problem}; host check decides"
                )
        verdict = await self._blocked_or_not(verdict, result)
        if result.outcome is ProbeOutcome.OK:
            self._record.streak_results.clear()
        else:
            self._record.streak_results.append(result)
        self._log.info(
            "probe",
            tier=result.tier.value,
            outcome=result.outcome.value,
            reason=result.reason,
            note=verdict.note,
            incident=self._record.incident_id,
        )
        reprobe = verdict.reprobe is not None and not is_reprobe and self._may_reprobe(result)
        if verdict.reprobe is not None and not is_reprobe and not reprobe:
            verdict = replace(verdict, note=f"liveness passed while {self._record.state}")
        change = (
            await self._machine.fire(self._record.name, verdict.trigger)
            if verdict.trigger
            else None
        )
        if change is not None:
            await self._record.record_change(change, verdict.note, result, progress=progress)
        else:
            await self._record.record_probe(result, verdict.note, progress)
        if reprobe and verdict.reprobe is not None:
            await self.probe(verdict.reprobe, is_reprobe=True)

    async def _blocked_or_not(self, verdict: Judgement, result: ProbeResult) -> Judgement:
        """Behind a router (`via`, `backend`): a confirmed failure while the router or the
        backend fails is theirs (`blocked`: no incident, no repair here), and so is a first
        failure while one of them is known to fail (its own worker says so: nothing to
        confirm, and its repair may end the failure before a confirmation would); blocked, a
        failure counted `failures_to_down` times while both answer again is this endpoint's."""
        if self._dependency_check is None or result.ok:
            return verdict
        state = self._record.state
        own = (
            state is State.UNREACHABLE
            and not self._record.unreachable
            and verdict.streaks.fail >= self._limits.failures_to_down
        )
        if verdict.trigger is not Trigger.DOWN and not own:
            if state not in _BLOCKED_AT_ONCE:
                return verdict
            known = await self._dependency_check(self.endpoint, probe=False)
            if not known:
                return verdict
            self._record.blocked_by = known
            self._record.last_reason = f"blocked by {known}"
            return replace(verdict, trigger=Trigger.BLOCKED, note=f"blocked by {known}")
        blocked = await self._dependency_check(self.endpoint)
        if blocked:
            self._record.blocked_by = blocked
            self._record.last_reason = f"blocked by {blocked}"
            if state is State.UNREACHABLE:
                return replace(verdict, trigger=None, note=f"still blocked by {blocked}")
            return replace(verdict, trigger=Trigger.BLOCKED, note=f"blocked by {blocked}")
        if own:
            note = f"its router and backend answer: {result.reason}"
            return replace(verdict, trigger=Trigger.UNBLOCKED, note=note)
        return verdict

    def _may_reprobe(self, result: ProbeResult) -> bool:
        """A re-probe to confirm a failure always; a real check brought forward by a liveness
        pass once per state."""
        if result.tier is not Tier.LIVENESS or not result.ok:
            return True
        if not self._forward_armed:
            self._log.info("real check not brought forward", why="once per state")
            return False
        self._forward_armed = False
        return True

    async def on_unit(self, signal: UnitSignal) -> None:
        """systemd said something about a unit: a death plus one failed probe is down at once;
        `started` is evidence only (it never starts a grace: a crash loop starts every few
        seconds); in maintenance, remediating or verifying it is our own doing."""
        self._log.info("unit event", unit=signal.unit, kind=signal.kind, line=signal.line)
        if self._record.state in EVENT_IGNORED:
            await self._record.record_unit(
                signal, f"not judged: {self._record.state}", judged=False
            )
            return
        if signal.kind == "load_failed":
            await self._on_load_failed(signal)
            return
        if not signal.down:
            await self._record.record_unit(signal, "evidence only", judged=False)
            return
        self._record.last_unit_signal = signal
        tier = Tier.DEEP if self.endpoint.kind == "health" else Tier.LIVENESS
        done, result = await self._queue.abortable(self._prober(self.endpoint, tier))
        if not done or result is None:
            return
        words = unit_death_verdict(self._record.state, result)
        verdict = judge_unit_death(
            state=self._record.state, streaks=self._record.streaks, result=result, line=signal.line
        )
        self._record.streaks = verdict.streaks
        self._record.last_reason = result.reason
        if not result.ok:
            self._record.last_problem = result
            self._record.streak_results.append(result)
        change = (
            await self._machine.fire(self._record.name, verdict.trigger)
            if verdict.trigger
            else None
        )
        if change is not None:
            await self._record.record_change(change, verdict.note, result)
        else:
            await self._record.record_probe(result, verdict.note)
        await self._record.record_unit(signal, words)
        self._heard(unit_heard(signal))

    async def _on_load_failed(self, signal: UnitSignal) -> None:
        """The server said a load a request asked for failed: the failure itself, heard (no probe
        would see it: the server answers, the model is just not loaded). Down at once from a
        calm state; in its startup grace recorded only; while down or escalated, new evidence."""
        if signal.model and signal.model != self.endpoint.model:
            await self._record.record_unit(
                signal, f"another model's load ({signal.model})", judged=False
            )
            return
        state = self._record.state
        if state in _LOAD_DOWN_FROM:
            self._record.last_unit_signal = signal
            self._record.last_reason = f"a load failed: {signal.message}"
            await self._record.fire(
                Trigger.DOWN,
                f"{signal.line}: {signal.message}",
                data={"unit": signal.unit, "host": signal.host},
                cause=f"a load failed ({signal.result}): {signal.message}",
            )
            await self._record.record_unit(signal, "a load failed: down")
            return
        await self._record.record_unit(signal, f"a load failed; {state}", judged=False)
        if state in (State.DOWN, State.ESCALATED):
            self._record.last_unit_signal = signal
            self._heard(load_heard(signal))
