"""One host's event stream: a long-lived `journalctl -f -o json` about the host's units, read
entry by entry into unit events, resumed from the last cursor after every reconnect.

A session: open the transport, ask the journal for its newest cursor (`journalctl -n 1`: this
also proves journalctl runs and may read the system journal), follow from the stream's own
cursor (or that newest one the first time; the entry at the cursor itself is skipped), and for
every entry: recognise it, confirm a death with `systemctl show` on the same connection, deliver
the event, then move the cursor past the entry. The cursor only moves after the entry's event
was delivered, so a session cut anywhere resumes at the first entry not yet delivered: nothing
is missed and nothing comes twice.

Status (a `StreamStatus`, for `status`): `connecting`, `streaming`, `reconnecting (attempt N,
next in Xs)` while the stream comes back with backoff, `polling: <reason>` when it cannot be
opened (journalctl missing or refused, the login refused, or `poll_after` connection attempts
failed in a row):
the units are then read with `systemctl show` every `poll_every` and the stream is tried again
every `retry_stream_every`. Nothing here waits without a deadline but the follow itself, whose
connection SSH keepalives watch.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import structlog

from supervisor.core.backoff import Backoff
from supervisor.core.clock import utcnow
from supervisor.core.streamstatus import CONNECTING, STREAMING, StreamPhase, StreamStatus
from supervisor.hear.streams.events import EventKind, UnitEvent
from supervisor.hear.streams.journal import (
    JournalEntry,
    follow_argv,
    head_argv,
    head_cursor,
    parse_entry,
)
from supervisor.hear.streams.poll import PolledUnit, changes, parse_show, show_argv
from supervisor.hear.streams.protocol import Follow, Ran, Transport, TransportError
from supervisor.hear.streams.recognise import CRASH_AFTER, Recognised, Recogniser, escalate

Deliver = Callable[[UnitEvent], None]


@dataclass(frozen=True, kw_only=True)
class StreamSettings:
    backoff: Backoff = field(default_factory=Backoff)
    command_timeout_s: float = 10.0  #: the head cursor, one `systemctl show`
    confirm: bool = True  #: confirm a death with `systemctl show` before delivering it
    crash_after: int = CRASH_AFTER
    stable_s: float = 30.0  #: a session that lasted this long resets the attempt count
    poll_after: int = 6  #: failed connection attempts in a row before the host counts as polling
    poll_every_s: float = 30.0
    retry_stream_every_s: float = 300.0


class HostStream:
    """The event stream of one host's `units`; `run()` until cancelled."""

    def __init__(
        self,
        host: str,
        units: tuple[str, ...],
        transport: Transport,
        deliver: Deliver,
        *,
        cursor: str | None = None,
        settings: StreamSettings | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.host = host
        self.units = units
        self.cursor = cursor  #: the last delivered entry's journal cursor (persist it to resume)
        self.status: StreamStatus = CONNECTING
        self.skipped = 0  #: malformed lines read and skipped
        self.sessions = 0  #: follows opened
        self._transport = transport
        self._deliver = deliver
        self._settings = settings or StreamSettings()
        self._rng = rng or random.Random()
        self._recogniser = Recogniser(units, self._settings.crash_after)
        self._log = structlog.get_logger("supervisor.hostevents").bind(host=host)

    async def run(self) -> None:
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                reason = await self._session()
            except TransportError as exc:
                reason = exc.reason
                if exc.lasting:
                    await self._poll(reason)
                    attempt = 0
                    continue
            except Exception as exc:  # a bug here must not end the host's stream for good
                self._log.exception("host event stream failed")
                reason = f"{type(exc).__name__}: {exc}"
            if time.monotonic() - started >= self._settings.stable_s:
                attempt = 0
            attempt += 1
            delay = self._settings.backoff.delay(attempt, self._rng)
            if attempt >= self._settings.poll_after:
                self.status = StreamStatus(phase=StreamPhase.POLLING, reason=reason)
            else:
                self.status = StreamStatus(
                    phase=StreamPhase.RECONNECTING, reason=reason, attempt=attempt, next_in_s=delay
                )
            self._log.warning(
                "host event stream lost", reason=reason, attempt=attempt, delay_s=delay
            )
            await asyncio.sleep(delay)

    async def close(self) -> None:
        await self._transport.close()

    async def _session(self) -> str:
        """Stream until the follow ends; the reason it ended. `TransportError` when it could not
        be opened (`lasting` when journalctl itself refused)."""
        head = await self._transport.run(
            head_argv(), timeout=self._settings.command_timeout_s, sudo=True
        )
        if not head.ok:
            raise TransportError(
                f"journalctl failed: {head.why()}", lasting=head.status is not None
            )
        if self.cursor is None:
            self.cursor = head_cursor(head.stdout)
        start = self.cursor
        follow = await self._transport.follow(follow_argv(self.units, start), sudo=True)
        self.sessions += 1
        self.status = STREAMING
        self._log.info("host event stream open", units=list(self.units), cursor=self.cursor)
        try:
            await self._read(follow, start)
        finally:
            ended = await follow.stop()
        if "cursor" in ended.stderr:  # `Failed to seek to cursor: Invalid argument`
            self._log.warning(
                "journal cursor refused; starting from the newest entry", cursor=self.cursor
            )
            self.cursor = None
        return f"the journal stream ended: {ended.why()}"

    async def _read(self, follow: Follow, start: str | None) -> None:
        while line := await follow.readline():
            entry = parse_entry(line)
            if entry is None:
                if line.strip():
                    self.skipped += 1
                continue
            if entry.cursor == start:  # `--cursor` prints its own entry: handled, or from before
                continue
            recognised = self._recogniser.feed(entry)
            if recognised is not None:
                self._deliver(await self._event(recognised, entry))
            self.cursor = entry.cursor

    async def _event(self, found: Recognised, entry: JournalEntry) -> UnitEvent:
        event = UnitEvent(
            host=self.host,
            unit=found.unit,
            kind=found.kind,
            message=found.message,
            at=entry.at,
            cursor=entry.cursor,
            lines=found.lines,
            result=found.result,
            exit_code=found.exit_code,
            exit_status=found.exit_status,
            n_restarts=found.n_restarts,
            model=found.model,
        )
        if not (self._settings.confirm and found.kind.down):
            return event
        state = await self._show(found.unit)
        if state is None:
            return event
        kind = escalate(found.kind, state.n_restarts, state.result, self._settings.crash_after)
        return replace(
            event,
            kind=kind,
            active_state=state.active_state,
            sub_state=state.sub_state,
            result=found.result or state.result,
            exit_code=found.exit_code or state.exit_code,
            exit_status=found.exit_status if found.exit_status is not None else state.exit_status,
            n_restarts=state.n_restarts,
            confirmed=True,
        )

    async def _show(self, unit: str) -> PolledUnit | None:
        shown = await self._states((unit,))
        return shown.get(unit) if shown else None

    async def _states(self, units: tuple[str, ...]) -> dict[str, PolledUnit] | None:
        try:
            ran: Ran = await self._transport.run(
                show_argv(units), timeout=self._settings.command_timeout_s
            )
        except TransportError:
            return None
        return parse_show(ran.stdout) if ran.ok else None

    async def _poll(self, reason: str) -> None:
        """Poll the units' state until it is time to try the stream again."""
        self.status = StreamStatus(phase=StreamPhase.POLLING, reason=reason)
        self._log.warning("host event stream unavailable; polling", reason=reason)
        until = time.monotonic() + self._settings.retry_stream_every_s
        before: dict[str, PolledUnit] | None = None
        while time.monotonic() < until:
            after = await self._states(self.units)
            if after is not None and before is not None:
                for change in changes(before, after, self._settings.crash_after):
                    self._deliver(
                        self._polled(change.unit, change.kind, change.message, change.state)
                    )
            before = after if after is not None else before
            await asyncio.sleep(
                min(self._settings.poll_every_s, max(0.0, until - time.monotonic()))
            )

    def _polled(self, unit: str, kind: EventKind, message: str, state: PolledUnit) -> UnitEvent:
        return UnitEvent(
            host=self.host,
            unit=unit,
            kind=kind,
            message=message,
            at=utcnow(),
            cursor="",
            active_state=state.active_state,
            sub_state=state.sub_state,
            result=state.result,
            exit_code=state.exit_code,
            exit_status=state.exit_status,
            n_restarts=state.n_restarts,
            confirmed=True,
            source="poll",
        )
