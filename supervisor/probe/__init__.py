"""Probes: one call checks one endpoint at one tier and always returns a `ProbeResult`.

`run_probe` never raises (except `asyncio.CancelledError`): refused connections, HTTP errors,
bad bodies, engine errors in a stream and the probe-wide deadline all become a FAIL or DEGRADED
result with a plain `reason`.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING

import httpx

from supervisor import __version__
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.probe.completion import judge_completion, slow_reason
from supervisor.probe.context import CheckFinding, ProbeContext, ProbeError
from supervisor.probe.http import one_line, timed_out_reason, transport_reason
from supervisor.probe.registry import CHECKS, Check, KindChecks
from supervisor.probe.wire import CertifiContext, ProbeHttp

if TYPE_CHECKING:
    from supervisor.config.supervised import Endpoint
    from supervisor.core.clock import Clock

__all__ = [
    "CHECKS",
    "Check",
    "Finding",
    "KindChecks",
    "ProbeContext",
    "ProbeError",
    "judge_completion",
    "make_client",
    "make_http_client",
    "run_probe",
    "slow_reason",
]


USER_AGENT = f"fleet-supervisor/{__version__}"


def make_client(tls: ssl.SSLContext | None = None) -> ProbeHttp:
    """A probe client (`supervisor.probe.wire`): no proxies from the environment, no redirects
    followed, keep-alive per origin; TLS with `tls`, else certifi's CA bundle (loaded once, on
    the first `https` URL).

    The daemon gives each endpoint its own (sharing one TLS context): one pool for hundreds of
    servers costs CPU that grows with the square of the probes in flight (with httpx, 500
    endpoints at once: 6.5-8.5 s of CPU shared, 0.75-1.2 s one client each), and a broken
    keep-alive connection of one endpoint never touches another's.
    """
    return ProbeHttp(tls, user_agent=USER_AGENT)


def make_http_client(tls: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    """An httpx client as the probes' was (no proxies from the environment, no redirects
    followed): the repair runner's and progress reads' (`/metrics`), and the doctor's. Its
    transport is made at its first request (`_FirstUse`)."""
    return httpx.AsyncClient(
        trust_env=False,
        follow_redirects=False,
        headers={"user-agent": USER_AGENT},
        transport=_FirstUse(tls if tls is not None else True),
    )


class _FirstUse(httpx.AsyncBaseTransport):
    """httpx's own transport, made when the client sends its first request: the daemon's
    client sends none while the fleet stays healthy, and making it loads httpcore and h11
    (about 4 MB of the daemon's RSS)."""

    def __init__(self, verify: ssl.SSLContext | bool) -> None:
        self._verify = verify
        self._made: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._made is None:
            self._made = httpx.AsyncHTTPTransport(verify=self._verify, trust_env=False)
        return await self._made.handle_async_request(request)

    async def aclose(self) -> None:
        if self._made is not None:
            await self._made.aclose()


def make_tls() -> ssl.SSLContext:
    """The TLS context probe clients share (the CA bundle httpx uses by default, read on the
    first TLS connection)."""
    return CertifiContext()


async def run_probe(
    endpoint: Endpoint, tier: Tier, client: ProbeHttp, *, clock: Clock
) -> ProbeResult:
    """Run the endpoint kind's check for `tier` within `endpoint.probe.timeout`."""
    ctx = ProbeContext(endpoint, client, clock)
    at, started = clock.now(), clock.monotonic()
    finding = await _checked(ctx, tier)
    return ProbeResult(
        endpoint=endpoint.name,
        tier=tier,
        check=finding.check,
        outcome=finding.outcome,
        reason=finding.reason,
        at=at,
        latency_s=max(0.0, clock.monotonic() - started),
        http_status=finding.http_status,
        ttft_s=finding.ttft_s,
        tok_s=finding.tok_s,
        tokens=finding.tokens,
        detail=finding.detail,
    )


async def _checked(ctx: ProbeContext, tier: Tier) -> CheckFinding:
    kind = CHECKS.get(ctx.endpoint.kind)
    if kind is None:
        return _failed(ctx, f"no probe for kind '{ctx.endpoint.kind}'")
    check = kind.for_tier(tier)
    try:
        async with asyncio.timeout(ctx.timeout_s):
            return await check(ctx)
    except ProbeError as failure:
        return _failed(ctx, failure.reason, failure.outcome, failure.http_status)
    except TimeoutError:
        return _failed(ctx, timed_out_reason(ctx.timeout_s))
    except httpx.HTTPError as exc:
        return _failed(ctx, transport_reason(exc, ctx.timeout_s))
    except httpx.InvalidURL as exc:
        return _failed(ctx, f"bad URL: {one_line(str(exc))}")
    except Exception as exc:  # the contract: a probe reports, it never takes its caller down
        return _failed(ctx, f"probe error: {type(exc).__name__}: {one_line(str(exc))}")


def _failed(
    ctx: ProbeContext,
    reason: str,
    outcome: ProbeOutcome = ProbeOutcome.FAIL,
    http_status: int | None = None,
) -> CheckFinding:
    status = http_status if http_status is not None else ctx.http_status
    return CheckFinding(check=ctx.check, outcome=outcome, reason=reason, http_status=status)
