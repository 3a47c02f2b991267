"""Live updates: server-sent events from the typed timeline. The store calls its `on_timeline`
hooks after every committed entry (the notifier's composer wakes on the same hook); each open
stream wakes, reads the entries after the last one it sent and sends each as a `timeline` event
(id, at, subject, type, kind, incident, summary). A page starts its stream after the newest entry
it was rendered with (`?after=`), so nothing committed while it loads is missed. A `tick` every
few seconds keeps proxies from closing the stream and lets the page refresh what changes without
an entry (TTFT, tok/s)."""

from __future__ import annotations

import asyncio
import json
from contextlib import suppress

import structlog
from aiohttp import web

from supervisor.core.tenure import Tenure
from supervisor.record.store.errors import StoreError
from supervisor.record.store.records import TimelineRow
from supervisor.record.store.store import Store
from supervisor.tell.web.page.reads import entries_after, last_entry_id

log = structlog.get_logger("supervisor.ops.page")

TICK_S = 5.0


class Feed:
    """Wakes every open stream when the store commits a timeline entry."""

    def __init__(self, store: Store, tenure: Tenure | None = None) -> None:
        self._store = store
        #: a leader's streams end the moment it no longer leads by its own clock
        self._tenure = tenure or Tenure()
        self._waiting: set[asyncio.Event] = set()
        self._hooked = False

    def _wake(self) -> None:
        for event in list(self._waiting):
            event.set()

    def attach(self) -> None:
        if not self._hooked:
            self._store.on_timeline.append(self._wake)
            self._hooked = True

    def detach(self) -> None:
        if self._hooked and self._wake in self._store.on_timeline:
            self._store.on_timeline.remove(self._wake)
        self._hooked = False
        self._wake()

    def _stops(self) -> bool:
        return self._tenure.stops("the page's event streams")

    async def newest(self) -> int:
        """The newest entry's id: a page reads it before its own reads and opens its stream
        with `?after=` it, so an entry committed while the page loads still reaches it."""
        return await last_entry_id(self._store)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """GET /events?after=ID: the entries after ID, then each as it is committed.
        `Last-Event-ID` (sent by a reconnecting browser) resumes after that one instead; with
        neither, the stream starts at the newest."""
        given = request.query.get("after", "")
        if given and not (given.isascii() and given.isdigit()):
            raise web.HTTPBadRequest(text=f"after: not an entry id: {given[:40]!r}\n")
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        resume = request.headers.get("Last-Event-ID", "")
        if not (resume.isascii() and resume.isdigit()):
            resume = given
        after = int(resume) if resume else await self.newest()
        event = asyncio.Event()
        self._waiting.add(event)
        try:
            await response.write(b"retry: 2000\n\n")
            while self._hooked and not self._stops():
                for row in await entries_after(self._store, after):
                    # the lease's deadline again just before each event: a read that spanned a
                    # freeze (the process stopped while it waited for its connection) returns
                    # what the new leader wrote meanwhile, and a slow browser's write of the
                    # event before can outlast the lease
                    if self._stops():
                        return response
                    await response.write(frame(row))
                    after = row.id
                with suppress(TimeoutError):
                    async with asyncio.timeout(TICK_S):
                        await event.wait()
                        event.clear()
                        continue
                if self._stops():
                    break
                await response.write(b"event: tick\ndata: {}\n\n")
        except ConnectionError:
            pass  # the browser went away
        except StoreError as exc:  # the browser reconnects (Last-Event-ID) and catches up
            log.warning("live feed ended", error=str(exc))
        finally:
            self._waiting.discard(event)
        return response


def frame(row: TimelineRow) -> bytes:
    """One `timeline` event."""
    document = {
        "id": row.id,
        "at": row.at.isoformat(),
        "subject": row.subject,
        "incident": row.incident_id,
        "type": row.type,
        "kind": row.kind.value,
        "summary": row.summary,
    }
    return f"event: timeline\nid: {row.id}\ndata: {json.dumps(document)}\n\n".encode()
