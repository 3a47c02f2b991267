"""The bot's commands that look and change nothing: `/status`, `/incidents`, `/timeline`,
`/diagnose`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from supervisor.control import ControlApi
from supervisor.core.clock import Clock
from supervisor.hear.reachability import HostWatcher
from supervisor.record.store.store import Store
from supervisor.record.store.who_leads import leader_view, leadership_line
from supervisor.tell.telegram import texts
from supervisor.tell.telegram.bot._common import (
    UsageError,
    endpoint_arg,
    incident_arg,
    parse_number,
)
from supervisor.tell.telegram.texts import h
from supervisor.worker import EndpointWorker


class Looking:
    def __init__(
        self,
        *,
        store: Store,
        workers: Mapping[str, EndpointWorker],
        hosts: Mapping[str, HostWatcher],
        control: ControlApi | None,
        clock: Clock,
        diagnose: Callable[[str], Awaitable[list[str]]] | None,
    ) -> None:
        self._store = store
        self._workers = workers
        self._hosts = hosts
        self._control = control
        self._clock = clock
        self._diagnose = diagnose

    async def status(self, _args: list[str], _who: str) -> str:
        now = self._clock.now()
        lines = []
        for name, w in self._workers.items():
            line = f"<b>{h(name)}</b>: {w.state.value} for {texts.rounded(now - w.record.since)}"
            figures = []
            if w.record.last_ttft_s is not None:
                figures.append(f"ttft {w.record.last_ttft_s:.2f}s")
            if w.record.last_tok_s is not None:
                figures.append(f"{w.record.last_tok_s:.1f} tok/s")
            if figures:
                line += f" ({', '.join(figures)})"
            if w.record.incident_id is not None:
                line += f" · incident #{w.record.incident_id}"
            lines.append(line)
        for name, host in self._hosts.items():
            lines.append(f"host {h(name)}: {host.state} for {texts.rounded(now - host.since)}")
        paused = self._control is not None and self._control.fleet_paused
        lines.append("automatic action: " + ("paused (/resume)" if paused else "on"))
        if self._store.fence_epoch is not None:  # [leadership] several instances: who leads
            lines.append(h(leadership_line(await leader_view(self._store))))
        return "\n".join(lines)

    async def incidents(self, args: list[str], _who: str) -> str:
        limit = parse_number(args[0], "N", low=1, high=50) if args else 5
        rows = await self._store.incidents(limit=limit)
        if not rows:
            return "no incidents"
        lines = []
        for row in rows:
            when = row.opened_at.strftime("%Y-%m-%d %H:%M:%SZ")
            took = row.duration
            status = "open" if took is None else f"closed after {texts.rounded(took)}"
            lines.append(f"#{row.id} {h(row.subject)} {h(row.last_state)} · {when} · {status}")
            lines.append(f"  {h(row.cause)}")
        return "\n".join(lines)

    async def timeline(self, args: list[str], _who: str) -> str:
        incident_id = incident_arg(args, "/timeline ID")
        incident = await self._store.incident(incident_id)
        if incident is None:
            raise UsageError(f"no incident {incident_id}")
        lines = [f"incident #{incident.id}: {h(incident.subject)}: {h(incident.cause)}"]
        for row in await self._store.timeline(incident_id):
            summary = row.summary if len(row.summary) <= 300 else row.summary[:299] + "…"
            lines.append(f"{row.at.strftime('%H:%M:%S')} {row.kind.value}: {h(summary)}")
        return "\n".join(lines)

    async def diagnose(self, args: list[str], _who: str) -> str:
        worker = endpoint_arg(self._workers, args, "/diagnose NAME")
        if self._diagnose is None:
            raise UsageError("diagnosis is not available here")
        lines = await self._diagnose(worker.name)
        return "\n".join(h(line) for line in lines)
