"""A live diagnosis: run the collectors the rules ask for and find the first rule that matches.

Collector results are cached for the whole diagnosis by (collector, where it runs, filled
params), so two rules asking for `unit_status` of the same unit run it once. A collector that
fails, hangs past its deadline or raises gives evidence with an error, never an exception:
the rules that needed it do not match, and the diagnosis records why. A collector that does not
apply to the scope (a launchd collector on a systemd host, a container's file where there is no
container) is neither run nor recorded as a run; the rules that asked for it still say why.

With `settle`, the diagnosis first waits for a server whose engine died to exit, and for a
restart systemd or launchd is about to make (see
`supervisor.playbook.evidence.restarts` and `supervisor.playbook.matching`); what was gathered
before the wait is not reused after it, and `latest` says which probe failure and unit death to
read then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import Clock
from supervisor.core.durations import format_duration
from supervisor.core.events import ProbeResult, UnitSignal
from supervisor.core.httpclient import HttpClient
from supervisor.execute.base import Executor
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    Collector,
    CollectorParams,
    Scope,
)
from supervisor.playbook.evidence.restarts import (
    Restart,
    engine_died,
    wait_for_exit,
    wait_for_restarts,
)
from supervisor.playbook.loader import Playbook
from supervisor.playbook.matching import Latest, match_rules
from supervisor.playbook.model import EvidenceItem
from supervisor.playbook.registries import Collectors, collectors_or_default
from supervisor.playbook.results import DiagnosisResult, EvidenceRun
from supervisor.playbook.scopes import scopes_of

DEADLINE_FACTOR = 4
"""A collector runs a few commands, each bounded by `timeout`; one still running after this
many timeouts is cut off (a collector bug must not stall the diagnosis)."""

_CacheKey = tuple[str, str | None, str | None, str]


class _CachedGather:
    """Runs collectors, at most once per (collector, host, unit, params); records each run."""

    def __init__(
        self,
        *,
        executor: Executor,
        http: HttpClient,
        timeout: timedelta,
        last_ok_at: datetime | None = None,
    ):
        self._executor = executor
        self._http = http
        self._timeout = timeout
        self._last_ok_at = last_ok_at
        self._cache: dict[_CacheKey, CollectedEvidence] = {}
        self.runs: list[EvidenceRun] = []

    async def __call__(
        self, item: EvidenceItem, collector: Collector[Any], scope: Scope, params: CollectorParams
    ) -> CollectedEvidence:
        host = scope.host.name if scope.host is not None and collector.needs_host else None
        unit = scope.unit.unit if scope.unit is not None and collector.needs_host else None
        key = (collector.name, host, unit, params.model_dump_json())
        why = collector.applies(scope, params)
        if why:  # not run, not recorded: the rule's evidence error says why
            return CollectedEvidence(collector=collector.name, error=why)
        if key not in self._cache:
            evidence = await self._run(collector, scope, params)
            self._cache[key] = evidence
            self.runs.append(
                EvidenceRun(
                    evidence_id=item.id,
                    collector=collector.name,
                    scope=scope.label,
                    host=host,
                    params=params.model_dump(mode="json"),
                    evidence=evidence,
                )
            )
        return self._cache[key]

    def forget(self) -> None:
        """Gather afresh from now on (the units restarted meanwhile)."""
        self._cache.clear()

    def context(self, scope: Scope) -> CollectContext:
        return CollectContext(
            scope=scope,
            executor=self._executor,
            timeout=self._timeout,
            http=self._http,
            last_ok_at=self._last_ok_at,
        )

    async def _run(
        self, collector: Collector[Any], scope: Scope, params: CollectorParams
    ) -> CollectedEvidence:
        if collector.needs_host and scope.host is None:
            message = "no host to run it on (the endpoint has no units and no host)"
            return CollectedEvidence(collector=collector.name, error=message)
        context = self.context(scope)
        deadline = self._timeout * DEADLINE_FACTOR
        try:
            async with asyncio.timeout(deadline.total_seconds()):
                return await collector.run(context, params)
        except TimeoutError:
            message = f"the collector did not finish within {format_duration(deadline)}"
            return CollectedEvidence(collector=collector.name, error=message)
        except Exception as exc:  # a collector bug must not end the diagnosis
            message = f"the collector failed: {type(exc).__name__}: {exc}"
            return CollectedEvidence(collector=collector.name, error=message)


async def diagnose(
    endpoint: Endpoint,
    *,
    config: FleetConfig,
    state: str,
    trigger: ProbeResult | None,
    playbook: Playbook,
    executor: Executor,
    http: HttpClient,
    timeout: timedelta,
    collectors: Collectors | None = None,
    last_ok_at: datetime | None = None,
    event: UnitSignal | None = None,
    settle: bool = False,
    latest: Callable[[], Latest] | None = None,
    clock: Clock | None = None,
    pause: Callable[[float], Awaitable[None]] | None = None,
) -> DiagnosisResult:
    """Gather evidence for `endpoint` (in `state`, after `trigger`) and match the playbook.
    `last_ok_at` (when the endpoint last passed a check) reaches the collectors through their
    context: the journal reads only what was logged since. With `settle`, the exit of a server
    whose engine died and the restarts systemd or launchd is about to make are waited for
    first (`latest`: the probe failure and unit death to read after the wait; default:
    `trigger` and `event`); `clock` and `pause` pace the wait."""
    gather = _CachedGather(executor=executor, http=http, timeout=timeout, last_ok_at=last_ok_at)
    scopes = scopes_of(endpoint, config)
    restarts: list[Restart] = []

    async def wait() -> Latest:
        contexts = [gather.context(scope) for scope in scopes]
        if clock is not None:
            contexts = [replace(ctx, clock=clock) for ctx in contexts]
        if pause is not None:
            contexts = [replace(ctx, pause=pause) for ctx in contexts]
        now = latest() if latest is not None else Latest(trigger=trigger, event=event)
        if engine_died(trigger) or engine_died(now.trigger):
            restarts.extend(await wait_for_exit(contexts))
        found = await wait_for_restarts(contexts)
        restarts.extend(found)
        if restarts:
            gather.forget()
        return latest() if latest is not None else now

    matched, evaluations = await match_rules(
        playbook.rules,
        scopes,
        state=state,
        trigger=trigger,
        collectors=collectors_or_default(collectors),
        gather=gather,
        event=event,
        settle=wait if settle else None,
    )
    return DiagnosisResult(
        endpoint=endpoint.name,
        state=str(state),
        matched=matched,
        evaluations=evaluations,
        evidence=tuple(gather.runs),
        restarts=tuple(restarts),
    )
