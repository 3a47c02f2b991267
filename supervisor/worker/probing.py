"""The probe discipline of an endpoint's worker: how probes run, what is read beside them, and
how their results and systemd's unit events are judged and recorded.

- A real check that failed or was slow asks what the server is doing first (`progress`, two
  reads of `/metrics`); `supervisor.judge.policy` makes busy a state of its own (never repaired) and
  hung down at once. The transition and the probe entries carry what was read.
- While down, escalated, unreachable or busy, a scheduled real check runs at most once per
  `completion_interval`; a liveness pass may bring one forward once per state (a recovery is
  still confirmed in seconds), not at every pass. Verification's own checks are the repair's.
- A unit's death plus one failed probe is down at once; a probe or a progress read in flight is
  abandoned when a host is lost (`supervisor.worker.queue`), and the commands that arrive
  meanwhile are served.
- Identical consecutive probe results are counted into runs (`supervisor.worker.runs`).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Protocol

from supervisor.config import Endpoint
from supervisor.core.clock import Clock
from supervisor.core.events import Outcome, ProbeResult, Tier, UnitSignal
from supervisor.judge.machine import FleetMachine, State, Trigger
from supervisor.judge.policy import (
    EVENT_IGNORED,
    Limits,
    judge,
    judge_unit_death,
    unit_death_verdict,
    wants_progress,
)
from supervisor.judge.progress import Progress
from supervisor.record.store import Store
from supervisor.worker.heard import progress_heard, unit_heard
from supervisor.worker.queue import WorkerQueue
from supervisor.worker.record import EndpointRecord
from supervisor.worker.state import Restored


class Prober(Protocol):
    async def __call__(self, endpoint: Endpoint, tier: Tier) -> ProbeResult: ...


class ProgressReader(Protocol):
    async def __call__(self, endpoint: Endpoint) -> Progress:
        """What the endpoint's server is doing (busy, hung, idle, unknown)."""


class HostCheck(Protocol):
    async def __call__(self, endpoint: Endpoint) -> str:
        """'' when every host serving the endpoint answers now, else why one does not."""


#: states in which a scheduled real check waits a whole completion interval after the last one
_SPACED = frozenset({State.DOWN, State.ESCALATED, State.UNREACHABLE, State.BUSY})
_SLACK_S = 0.5


class ProbingEndpoint(EndpointRecord):
    """An endpoint record judged from its probes; probes and progress reads run through
    `queue.abortable`, so commands are served meanwhile and a lost host abandons them."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        queue: WorkerQueue,
        machine: FleetMachine,
        store: Store,
        prober: Prober,
        clock: Clock,
        restored: Restored,
        unreachable_hosts: set[str],
        host_check: HostCheck | None,
        reopen_within: timedelta | None,
        progress: ProgressReader | None,
    ) -> None:
        super().__init__(
            endpoint,
            machine=machine,
            store=store,
            clock=clock,
            restored=restored,
            unreachable_hosts=unreachable_hosts,
            reopen_within=reopen_within,
        )
        self._queue = queue
        self._progress = progress
        self._prober = prober
        self._host_check = host_check
        self._last_deep: float | None = None  #: monotonic start of the latest real check
        self._forward_armed = True  #: a liveness pass may still bring a real check forward
        self._limits = Limits(
            failures_to_down=endpoint.probe.failures_to_down,
            degraded_after=endpoint.probe.degraded_after,
        )

    def _on_transition(self) -> None:
        self._forward_armed = True

    def _deep_not_due(self) -> bool:
        """A scheduled real check while down, escalated, unreachable or busy comes too soon after
        the last one (a liveness pass brought that one forward)."""
        if self.state not in _SPACED or self._last_deep is None or self.endpoint.kind == "health":
            return False
        settings = self.endpoint.probe
        spacing = (settings.completion_interval - settings.jitter).total_seconds() - _SLACK_S
        return self._clock.monotonic() - self._last_deep < spacing

    async def _probe(self, tier: Tier, *, is_reprobe: bool) -> None:
        if tier is Tier.DEEP:
            self._last_deep = self._clock.monotonic()
        done, result = await self._queue.abortable(self._prober(self.endpoint, tier))
        if not done or result is None:
            self._log.info("probe abandoned", tier=tier.value, why="a host was lost")
            return
        await self._on_result(result, is_reprobe=is_reprobe)

    async def _read_progress(self, result: ProbeResult) -> tuple[bool, Progress | None]:
        """What the server is doing, when the policy wants it for `result` (and, while
        escalated, after a failed real check: a changed verdict is new evidence)."""
        escalated = self.state is State.ESCALATED and result.tier is Tier.DEEP and not result.ok
        if self._progress is None or not (wants_progress(self.state, result) or escalated):
            return True, None
        done, progress = await self._queue.abortable(self._progress(self.endpoint))
        if progress is not None:
            self.last_progress = progress
            self._heard(progress_heard(progress))
        return done, progress

    async def _on_result(self, result: ProbeResult, *, is_reprobe: bool) -> None:
        done, progress = await self._read_progress(result)
        if not done:
            self._log.info("progress read abandoned", why="a host was lost")
            return
        # the sample is stored with the snapshot it leads to (_record_change, _record_probe)
        self.last_reason = result.reason
        if not result.ok:
            self.last_problem = result
        if result.ok:
            self.last_ok_at = result.at
            if result.tier is Tier.DEEP and result.ttft_s is not None:
                self.last_ttft_s, self.last_tok_s = result.ttft_s, result.tok_s
        verdict = judge(
            state=self.state,
            streaks=self.streaks,
            result=result,
            is_reprobe=is_reprobe,
            limits=self._limits,
            grace_until=self.grace_until,
            now=self._clock.now(),
            progress=progress,
        )
        self.streaks = verdict.streaks
        if verdict.trigger is Trigger.DOWN and self._host_check is not None:
            host_problem = await self._host_check(self.endpoint)
            if host_problem:
                # one cause, not N incidents: the host watcher will call it unreachable
                verdict = replace(
                    verdict, trigger=None, note=f"not confirmed: {host_problem}; host check decides"
                )
        if result.outcome is Outcome.OK:
            self._streak_results.clear()
        else:
            self._streak_results.append(result)
        self._log.info(
            "probe",
            tier=result.tier.value,
            outcome=result.outcome.value,
            reason=result.reason,
            note=verdict.note,
            incident=self.incident_id,
        )
        reprobe = verdict.reprobe is not None and not is_reprobe and self._may_reprobe(result)
        if verdict.reprobe is not None and not is_reprobe and not reprobe:
            verdict = replace(verdict, note=f"liveness passed while {self.state}")
        change = await self._machine.fire(self.name, verdict.trigger) if verdict.trigger else None
        if change is not None:
            await self._record_change(change, verdict.note, result, progress=progress)
        else:
            await self._record_probe(result, verdict.note, progress)
        if reprobe and verdict.reprobe is not None:
            await self._probe(verdict.reprobe, is_reprobe=True)

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

    async def _on_unit(self, signal: UnitSignal) -> None:
        """systemd said something about a unit: a death plus one failed probe is down at once;
        `started` is evidence only (it never starts a grace: a crash loop starts every few
        seconds); in maintenance, remediating or verifying it is our own doing."""
        self._log.info("unit event", unit=signal.unit, kind=signal.kind, line=signal.line)
        if self.state in EVENT_IGNORED:
            await self._record_unit(signal, f"not judged: {self.state}", judged=False)
            return
        if not signal.down:
            await self._record_unit(signal, "evidence only", judged=False)
            return
        self.last_unit_signal = signal
        tier = Tier.DEEP if self.endpoint.kind == "health" else Tier.LIVENESS
        done, result = await self._queue.abortable(self._prober(self.endpoint, tier))
        if not done or result is None:
            return
        words = unit_death_verdict(self.state, result)
        verdict = judge_unit_death(
            state=self.state, streaks=self.streaks, result=result, line=signal.line
        )
        self.streaks = verdict.streaks
        self.last_reason = result.reason
        if not result.ok:
            self.last_problem = result
            self._streak_results.append(result)
        change = await self._machine.fire(self.name, verdict.trigger) if verdict.trigger else None
        if change is not None:
            await self._record_change(change, verdict.note, result)
        else:
            await self._record_probe(result, verdict.note)
        await self._record_unit(signal, words)
        self._heard(unit_heard(signal))
