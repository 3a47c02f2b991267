"""The fleet as the store last saw it, for a follower's HTTP side: every configured endpoint
from its stored snapshot (`unknown` when none was ever stored), every watched host from its,
the rules from the playbook folder, the unit-event streams as the leader saved them, the
silences, pauses and control journal, and who leads. A `FleetSource` like the running daemon,
read afresh by `refresh` before each request.

What a follower says about who leads (its /healthz, its control refusals, the page's banner):

- the lease held: `a on forge leads (epoch 3)`
- released, or never taken: `no instance leads right now`
- run out, not taken over yet: `no instance leads right now (the lease of a on forge, epoch 3,
  ran out 4s ago)`
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import Clock, SystemClock
from supervisor.core.streamstatus import StreamStatus
from supervisor.playbook.loader import Playbook, load_playbook
from supervisor.record.store.cursors import read_streams
from supervisor.record.store.records import Snapshot, SubjectKind
from supervisor.record.store.store import Store
from supervisor.record.store.who_leads import LeaderView, leader_view
from supervisor.tell.web.follower_control import StoredControl

STORE_DEADLINE = 2.0
"""Seconds the store has to answer a request's read (as the leader's /healthz)."""


@dataclass(frozen=True, kw_only=True)
class StoredEndpoint:
    endpoint: Endpoint
    stored: Snapshot

    def snapshot(self) -> Snapshot:
        return self.stored


@dataclass(frozen=True, kw_only=True)
class StoredHost:
    state: str
    since: datetime | None
    incident_id: int | None
    last_reason: str


@dataclass(frozen=True)
class StoredStreams:
    """The hosts' unit-event streams as the leader last saved them (`journal_cursors`)."""

    saved: Mapping[str, StreamStatus]

    def status(self) -> Mapping[str, StreamStatus]:
        return self.saved


def leader_words(view: LeaderView) -> str:
    """Who leads, for a follower's answers (the list in this module's docstring)."""
    if view.current:
        return f"{view.leader} on {view.host} leads (epoch {view.epoch})"
    if view.leader is None:
        return "no instance leads right now"
    ago = max(0, round((view.now_ms - view.expires_ms) / 1000))
    return (
        f"no instance leads right now (the lease of {view.leader} on {view.host}, "
        f"epoch {view.epoch}, ran out {ago}s ago)"
    )


def health_text(view: LeaderView) -> str:
    """A follower's /healthz when its store answers: 200 either way (the instance is well; a
    fleet without a leader shows in `fleet_supervisor_lease_remaining_seconds`)."""
    if view.current:
        return f"ok: following {view.leader} on {view.host} (epoch {view.epoch})"
    return f"ok: following; {leader_words(view)}"


class StoredFleet:
    """`refresh()`, then read it like the running daemon (`supervisor.tell.web.source`)."""

    def __init__(self, config: FleetConfig, store: Store, *, me: str, clock: Clock | None = None):
        self.config = config
        self.store = store
        self.me = me
        self.clock: Clock = clock or SystemClock()
        self.workers: dict[str, StoredEndpoint] = {}
        self.hosts: dict[str, StoredHost] = {}
        self.unit_events = StoredStreams({})
        self.control = StoredControl(store, self.clock)  #: silences, pauses, control journal
        self.leader: LeaderView | None = None  #: as the last refresh read it
        self.unseen: frozenset[str] = frozenset()  #: endpoints with no stored snapshot

    @property
    def playbook(self) -> Callable[[], Playbook]:
        """The rules as they are in the folder now (a follower runs none of them)."""
        return partial(load_playbook, self.config.playbook.path)

    async def refresh(self) -> str:
        """Read the snapshots and the lease; '' when the store answered, else why not."""
        try:
            async with asyncio.timeout(STORE_DEADLINE):
                snapshots = await self.store.snapshots()
                view = await leader_view(self.store)
                await self.control.load()
                streams = await read_streams(self.store)
        except TimeoutError:
            return f"the store did not answer within {STORE_DEADLINE:g}s"
        except Exception as exc:  # what a store error says is the answer
            return f"the store does not answer: {exc}"
        self.leader = replace(view, me=self.me)
        self.unit_events = StoredStreams(streams.status)
        now = self.clock.now()
        stored = {(s.kind, s.name): s for s in snapshots}
        self.unseen = frozenset(
            name for name in self.config.endpoints if (SubjectKind.ENDPOINT, name) not in stored
        )
        self.workers = {
            name: StoredEndpoint(
                endpoint=endpoint,
                stored=stored.get((SubjectKind.ENDPOINT, name))
                or Snapshot(
                    kind=SubjectKind.ENDPOINT, name=name, state="unknown", since=now, updated_at=now
                ),
            )
            for name, endpoint in self.config.endpoints.items()
        }
        self.hosts = {
            name: StoredHost(
                state=snap.state,
                since=snap.since,
                incident_id=snap.incident_id,
                last_reason=snap.last_reason,
            )
            for name in self.config.hosts
            if (snap := stored.get((SubjectKind.HOST, name))) is not None
        }
        return ""

    def follows(self) -> str:
        """`this instance follows: a on forge leads (epoch 3)`, as the last refresh read it."""
        if self.leader is None:
            return "this instance follows: the store has not answered yet"
        return f"this instance follows: {leader_words(self.leader)}"
