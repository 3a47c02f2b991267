"""The one reconnect backoff (the host event streams, the store's listener, the Telegram
sender): exponential from `base_s`, capped at `cap_s`, with jitter so that many things lost at
once (the daemon's own network) do not all come back in the same instant."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Backoff:
    base_s: float = 1.0  #: the first retry's delay
    cap_s: float = 60.0  #: no delay is longer
    jitter: float = 0.5  #: up to this fraction is taken off each delay at random (0: exact)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before retry number `attempt` (1 = the first): `base * 2^(attempt-1)`,
        at most `cap`, less up to `jitter` of it (drawn from `rng`, else `random`'s own)."""
        raw = min(self.cap_s, self.base_s * 2.0 ** max(0, min(attempt - 1, 60)))
        draw = rng.random() if rng is not None else random.random()
        return raw * (1.0 - self.jitter * draw)
