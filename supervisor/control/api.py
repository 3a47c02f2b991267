"""The control API: what a person may tell the daemon, the same for every transport.

- `silence(target, ...)`: maintenance for the endpoints `target` names (an endpoint, a glob,
  `host:NAME` or `all`) until a time; stored, so a restart of the daemon keeps it.
- `unsilence(target, ...)`: ends the silences covering those endpoints; they are judged afresh.
- `pause(...)`/`resume(...)`: automatic repair off/on, fleet-wide or for one endpoint; stored.
- `ack(incident, ...)`: stop the reminders of an escalated incident.
- `restart(endpoint, ...)`: a restart through the one attempt runner.

Each call answers an `Answer` (never raises for a bad target) and is written to the control
journal with who, why and how it ended, refusals included; what concerns an open incident is
written to its timeline too. Endpoint state changes go through the endpoints' workers.
"""

from __future__ import annotations

from supervisor.control import entries
from supervisor.control.common import AckHook
from supervisor.control.model import Actor, Answer, Code
from supervisor.control.pausing import PauseControl
from supervisor.control.silencing import SilenceControl

__all__ = ["AckHook", "ControlApi"]


class ControlApi(SilenceControl, PauseControl):
    """Silences (`silencing`), pauses (`pausing`), acks and restarts; the state and the journal
    they share are `common`'s."""

    async def start(self) -> None:
        """Create the tables if missing; put stored pauses and silences back in force."""
        await self.tables.ensure()
        self._pauses = {row.scope: row for row in await self.tables.pauses()}
        await self.restore_silences()

    async def ack(self, incident_id: int, *, actor: Actor, why: str = "") -> Answer:
        """No more reminders of an escalated incident."""
        incident = await self.store.incident(incident_id)
        target = f"#{incident_id}"
        if incident is None:
            text = entries.no_incident_text(incident_id)
            return await self._refused("ack", target, actor, why, Code.NOT_FOUND, text)
        entry = entries.ack_entry(incident.subject, self._clock.now(), actor, why=why)
        worker = self._workers.get(incident.subject)
        if worker is not None:
            await worker.append(entry, incident_id=incident_id)
        else:  # a host's incident
            await self.store.append(incident_id, entry)
        for hook in list(self.on_ack):
            await hook(incident_id, actor)
        answer = Answer(
            code=Code.DONE, text=entries.acked_text(incident_id), subjects=(incident.subject,)
        )
        return await self._journal("ack", target, actor, why, answer)

    async def restart(self, endpoint: str, *, actor: Actor, why: str = "") -> Answer:
        """Restart the endpoint's units through the one attempt runner (its guards apply)."""
        refused = await self.check_endpoint("restart", endpoint, actor=actor, why=why)
        if refused is not None:
            return refused
        if self._remediator is None:
            text = entries.RESTARTS_NOT_AVAILABLE
            return await self._refused("restart", endpoint, actor, why, Code.REFUSED, text)
        result = await self._remediator.restart(self._workers[endpoint], who=actor.who)
        code = Code.DONE if result.ok else Code.REFUSED
        answer = Answer(code=code, text=result.text, subjects=(endpoint,))
        return await self._journal("restart", endpoint, actor, why, answer)
