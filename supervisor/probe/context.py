"""What every check gets (`ProbeContext`) and gives back (`Finding`, or a raised `ProbeError`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from supervisor.core.events import ProbeOutcome

if TYPE_CHECKING:
    from supervisor.config.supervised import Endpoint
    from supervisor.core.clock import Clock
    from supervisor.core.httpclient import HttpClient


@dataclass(frozen=True, kw_only=True)
class CheckFinding:
    """The verdict of one check, before `run_probe` stamps it with endpoint, tier and time."""

    check: str
    outcome: ProbeOutcome
    reason: str = ""
    http_status: int | None = None
    ttft_s: float | None = None
    tok_s: float | None = None
    tokens: int | None = None
    detail: str = ""
    reasoning_field: str = ""  #: a completion's: which field held the reasoning ('' none)


class ProbeError(Exception):
    """Raised inside a check to end it with a FAIL (or DEGRADED) finding and a plain reason."""

    def __init__(
        self,
        reason: str,
        *,
        http_status: int | None = None,
        outcome: ProbeOutcome = ProbeOutcome.FAIL,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.http_status = http_status
        self.outcome = outcome


class ProbeContext:
    """One probe in progress: the endpoint, the HTTP client, the clock, and the current step.

    `check` names the step being run (health, models, completion, …) so that a failure raised
    from anywhere, including the probe-wide deadline, is reported against the right check.
    `headers` go with every request to the endpoint's server (not to another one, such as a
    `tts` endpoint's `heard_by`).
    """

    def __init__(self, endpoint: Endpoint, client: HttpClient, clock: Clock) -> None:
        self.endpoint = endpoint
        self.client = client
        self.clock = clock
        self.headers = endpoint.request_headers()
        self.check = "http"
        self.http_status: int | None = None

    @property
    def timeout_s(self) -> float:
        return self.endpoint.probe.timeout.total_seconds()

    def url(self, path: str) -> str:
        """`path` below the endpoint's base URL (which has no trailing slash)."""
        return f"{self.endpoint.url}{path}"

    def require_model(self) -> str:
        model = self.endpoint.model
        if not model:
            raise ProbeError(f"no model configured for kind '{self.endpoint.kind}'")
        return model
