"""How often the Telegram component does things (tests shorten them). Kept apart from the
component so that a daemon without Telegram can name its timings without loading the client."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from supervisor.core.backoff import Backoff


@dataclass(frozen=True, kw_only=True)
class Pacing:
    #: the pause before each retry after a failure: from 1 s, doubling up to 60 s (jittered)
    retry: Backoff = field(default_factory=lambda: Backoff(base_s=1.0, cap_s=60.0))
    per_chat: float = 1.0  #: at least this long between two messages to one chat
    idle_poll: float = 1.0  #: how often an idle sender looks at the outbox anyway


@dataclass(frozen=True, kw_only=True)
class Timing:
    """How often things happen (tests shorten them)."""

    pacing: Pacing = field(default_factory=Pacing)
    compose_every: float = 1.0
    flap_every: timedelta = timedelta(minutes=5)
    settle: timedelta | None = None  #: default: `defaults.reopen_within`
    poll_timeout: float = 10.0  #: getUpdates long-poll
    startup_retry: float = 5.0
