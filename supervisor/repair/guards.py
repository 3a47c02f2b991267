"""Guard rails around every repair: one repair per host at a time, and attempt budgets.

Locks are taken in name order, so two pair endpoints sharing hosts can never deadlock. Budgets
are counted from the store's attempts table, so a restarted daemon still knows what it spent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from supervisor.core.durations import format_duration
from supervisor.record.store.store import Store


class HostLocks:
    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self.holders: dict[str, str] = {}  #: host -> who holds it (for "waiting for ..." notes)

    def busy(self, hosts: Iterable[str]) -> dict[str, str]:
        """The hosts among `hosts` held right now, with their holders."""
        return {h: self.holders[h] for h in sorted(set(hosts)) if h in self.holders}

    @asynccontextmanager
    async def hold(self, hosts: Iterable[str], holder: str) -> AsyncIterator[None]:
        taken: list[str] = []
        try:
            for name in sorted(set(hosts)):
                lock = self._locks.setdefault(name, asyncio.Lock())
                await lock.acquire()
                taken.append(name)
                self.holders[name] = holder
            yield
        finally:
            for name in reversed(taken):
                self.holders.pop(name, None)
                self._locks[name].release()


@dataclass(frozen=True, kw_only=True)
class Spend:
    """What a budget allows now."""

    allowed: bool
    note: str  #: e.g. "attempt 2 of 2 for ghost-execstart in 6h"


async def check_budget(
    store: Store,
    *,
    endpoint: str,
    rule_id: str,
    rule_attempts: int,
    rule_window: timedelta,
    max_attempts: int,
    window: timedelta,
    now: datetime,
) -> Spend:
    """The rule's own budget, then the endpoint's across all rules."""
    recent = await store.attempts(endpoint, since=now - max(rule_window, window))
    of_rule = [a for a in recent if a.rule_id == rule_id and a.started_at >= now - rule_window]
    of_endpoint = [a for a in recent if a.started_at >= now - window]
    if len(of_rule) >= rule_attempts:
        return Spend(
            allowed=False,
            note=f"budget spent: {rule_id} ran {len(of_rule)} of {rule_attempts} times "
            f"in {format_duration(rule_window)}",
        )
    if len(of_endpoint) >= max_attempts:
        return Spend(
            allowed=False,
            note=f"budget spent: {len(of_endpoint)} of {max_attempts} repairs of {endpoint} "
            f"in {format_duration(window)}",
        )
    return Spend(
        allowed=True,
        note=f"attempt {len(of_rule) + 1} of {rule_attempts} for {rule_id} "
        f"in {format_duration(rule_window)}",
    )
