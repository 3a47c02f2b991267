"""Counted probe runs: identical consecutive probe results of a tier inside an incident are one
`Probe` entry with a count and the time of the last.

A liveness pass between two identical failed real checks does not break their run (each tier
has its own), nor does an entry from outside. The run is written when it ends (another result of
that tier, a transition, the worker stopping) with the time of its first result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from supervisor.core.events import ProbeResult, Tier
from supervisor.judge.progress import Progress
from supervisor.record.store import Store
from supervisor.record.summaries import probe_entry


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
