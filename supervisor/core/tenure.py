"""This instance's lead as the parts that reach the outside check it (the bot's poller, the
sender, the HTTP answers, the page's event streams): a local fact, read on the monotonic clock
with no store round trip, so a leader woken from a freeze (SIGSTOP, a hung VM) learns it was
deposed *before* it does anything else. The fence (`supervisor.record.store.lease`) still
stands behind it for what goes through the store.

Each part that finds the lead gone says so once (`deposed`, a warning naming the part) and
stops; `on_lost` lets the claim loop find out at once too.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

log = structlog.get_logger("supervisor.leader")


def _always() -> bool:
    return True


class Tenure:
    """`holds()` while this instance leads (an unfenced daemon, one without a lease: always)."""

    def __init__(
        self,
        holds: Callable[[], bool] = _always,
        *,
        why: Callable[[], str] = lambda: "its lease ran out",
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self._holds = holds
        self._why = why
        self._on_lost = on_lost
        self._told: set[str] = set()  #: parts that said `deposed` already

    def holds(self) -> bool:
        return self._holds()

    def why(self) -> str:
        """Why we no longer lead (meaningful once `holds` is false)."""
        return self._why()

    def stops(self, part: str) -> bool:
        """True when we no longer lead: `part` must not reach the outside. The first time for
        each part, one `deposed` warning names it."""
        if self._holds():
            return False
        if part not in self._told:
            self._told.add(part)
            log.warning("deposed", stops=part, why=self.why())
            if self._on_lost is not None:
                self._on_lost()
        return True
