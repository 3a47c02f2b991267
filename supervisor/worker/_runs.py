"""Counted runs: identical consecutive probe results of a tier inside an incident are one
`Probe` entry with a count and the time of the last; repeated unit events of one kind are
counted the same way (`UnitRuns`).

A liveness pass between two identical failed real checks does not break their run (each tier
has its own), nor does an entry from outside. The run is written when it ends (another result of
that tier, a transition, the worker stopping) with the time of its first result.

A unit event is written at once the first time (it may explain what the endpoint does next);
the same event again (same unit, kind, result and exit status: a crash loop's `started` and
`crash_loop: status=203` every RestartSec) is counted, and the repeats are one more entry with
their count, the last one's line and when it was seen, written when the run ends (another event
of that kind on that unit, a transition, the worker stopping). A crash loop of any length is a
handful of entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from supervisor.core.events import ProbeResult, Tier, UnitSignal
from supervisor.judge.progress.judge import Progress
from supervisor.record.store.store import Store
from supervisor.record.summaries import probe_entry, unit_entry


@dataclass(kw_only=True)
class _Run:
    """Identical consecutive probe results inside one incident, not yet written."""

    first: ProbeResult
    note: str
    progress: Progress | None
    incident_id: int
    count: int = 1
    last_at: datetime | None = None

    def same(self, result: ProbeResult) -> bool:
        first = self.first
        return (result.tier, result.check, result.outcome, result.reason) == (
            first.tier,
            first.check,
            first.outcome,
            first.reason,
        )


class ProbeRuns:
    """The runs of one endpoint (`subject`), one per tier, not yet written to `store`."""

    def __init__(self, store: Store, *, subject: str) -> None:
        self._store = store
        self._subject = subject
        self._runs: dict[Tier, _Run] = {}  #: per tier, identical results not yet written

    async def count(
        self, result: ProbeResult, note: str, progress: Progress | None, *, incident_id: int
    ) -> None:
        """Count `result` into its tier's run in `incident_id`; a different result (or another
        incident) writes the run it ends and starts a new one."""
        run = self._runs.get(result.tier)
        if run is not None and run.incident_id == incident_id and run.same(result):
            run.count += 1
            run.last_at = result.at
            return
        if run is not None:
            await self._write(self._runs.pop(result.tier))
        self._runs[result.tier] = _Run(
            first=result, note=note, progress=progress, incident_id=incident_id
        )

    async def flush(self) -> None:
        """Write the runs of identical probe results (one per tier), the oldest first."""
        runs = sorted(self._runs.values(), key=lambda run: run.first.at)
        self._runs.clear()
        for run in runs:
            await self._write(run)

    async def _write(self, run: _Run) -> None:
        entry = probe_entry(
            run.first,
            run.note,
            subject=self._subject,
            count=run.count,
            last_at=run.last_at,
            progress=run.progress,
        )
        await self._store.append(run.incident_id, entry)


@dataclass(kw_only=True)
class _Repeats:
    """The same unit event seen again after its first (written) one, not yet written."""

    first: UnitSignal  #: the first event of the run (written when it came)
    verdict: str
    incident_id: int
    repeats: list[UnitSignal]
    judged: bool = True

    def same(self, signal: UnitSignal) -> bool:
        first = self.first
        return (signal.result, signal.exit_status) == (first.result, first.exit_status)


class UnitRuns:
    """The unit-event runs of one endpoint, one per (host, unit, kind)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._runs: dict[tuple[str, str, str], _Repeats] = {}

    async def count(
        self, signal: UnitSignal, verdict: str, *, incident_id: int, judged: bool = True
    ) -> None:
        """Write `signal` when it starts a run; count it when it repeats the run's event."""
        key = (signal.host, signal.unit, signal.kind)
        run = self._runs.get(key)
        if run is not None and run.incident_id == incident_id and run.same(signal):
            run.repeats.append(signal)
            return
        if run is not None:
            await self._write(self._runs.pop(key))
        await self._store.append(incident_id, unit_entry(signal, verdict, judged=judged))
        self._runs[key] = _Repeats(
            first=signal, verdict=verdict, incident_id=incident_id, repeats=[], judged=judged
        )

    async def flush(self) -> None:
        """Write the repeats counted so far (the oldest first); the runs start afresh."""
        runs = sorted(self._runs.values(), key=lambda run: run.first.at)
        self._runs.clear()
        for run in runs:
            await self._write(run)

    async def _write(self, run: _Repeats) -> None:
        if not run.repeats:
            return
        first, last = run.repeats[0], run.repeats[-1]
        entry = unit_entry(
            first,
            run.verdict,
            judged=run.judged,
            count=len(run.repeats),
            last_at=last.at,
            last_line=last.line,
        )
        await self._store.append(run.incident_id, entry)
