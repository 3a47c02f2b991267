"""How the other specs' pool hands its specs to its workers: pytest-xdist's `load` scheduling
(the next spec in order to whichever worker is free), with all workers but one at most holding
the specs that mostly wait (`tests/conftest.py`: WAIT_FIRST) at once.

Those specs come first (so that none is left running alone at the end), and with plain `load`
every worker took one: for about a minute and a half all four sat in a 60 s outage, a freeze or a
lease while the machine was 45-70 % idle (`vmstat`, 2 cores), though two thousand specs that
compute were waiting behind them. With one worker kept off them, that worker runs those specs
meanwhile; the waiting ones go on in the other lanes, each as soon as one frees.

When only waiting specs are left, a free worker takes one anyway: no worker ever idles while a
spec is pending. pytest-xdist has no public way to choose which pending spec a worker gets, so
this overrides `LoadScheduling._send_tests` (pytest-xdist 3.8; pyproject keeps it below 4)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScheduling
from xdist.workermanage import WorkerController


class WaitLanes(LoadScheduling):
    def __init__(
        self,
        config: pytest.Config,
        log: Producer | None,
        *,
        waits: Callable[[str], bool],
    ) -> None:
        super().__init__(config, log)
        self._waits = waits  #: whether the spec of this node id mostly waits
        self._lanes = max(1, self.numnodes - 1)
        self._waiting: frozenset[int] | None = None  #: indexes into the collection

    def _waiting_specs(self) -> frozenset[int]:
        if self._waiting is None:
            self._waiting = frozenset(
                i for i, nodeid in enumerate(self.collection or ()) if self._waits(nodeid)
            )
        return self._waiting

    def _send_tests(self, node: WorkerController, num: int) -> None:
        waiting = self._waiting_specs()
        holding = {
            other
            for other, pending in self.node2pending.items()
            if any(i in waiting for i in pending)
        }
        may_wait = node in holding or len(holding) < self._lanes
        chosen: list[int] = []
        for index in self.pending:
            if len(chosen) == num:
                break
            if index in waiting and not may_wait:
                continue
            chosen.append(index)
            if index in waiting and node not in holding:
                holding.add(node)
        if not chosen:  # only waiting specs are left: no worker idles while one is pending
            chosen = self.pending[:num]
        if chosen:
            taken = set(chosen)
            self.pending[:] = [i for i in self.pending if i not in taken]
            self.node2pending[node].extend(chosen)
            node.send_runtest_some(chosen)
