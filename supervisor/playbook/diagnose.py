"""A live diagnosis: run the collectors the rules ask for and find the first rule that matches.

Collector results are cached for the whole diagnosis by (collector, where it runs, filled
params), so two rules asking for `unit_status` of the same unit run it once. A collector that
fails, hangs past its deadline or raises gives evidence with an error, never an exception:
the rules that needed it do not match, and the diagnosis records why.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import httpx

from supervisor.config import Endpoint, FleetConfig
from supervisor.core.durations import format_duration
from supervisor.core.events import ProbeResult, UnitSignal
from supervisor.execute import Executor
from supervisor.playbook.evidence.base import (
    CollectContext,
    Collector,
    CollectorParams,
    Evidence,
    Scope,
)
from supervisor.playbook.loader import Playbook
from supervisor.playbook.matching import match_rules
from supervisor.playbook.model import EvidenceItem
from supervisor.playbook.registries import Collectors, collectors_or_default
from supervisor.playbook.results import Diagnosis, EvidenceRun
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
        http: httpx.AsyncClient,
        timeout: timedelta,
        last_ok_at: datetime | None = None,
    ):
        self._executor = executor
        self._http = http
        self._timeout = timeout
        self._last_ok_at = last_ok_at
        self._cache: dict[_CacheKey, Evidence] = {}
        self.runs: list[EvidenceRun] = []

    async def __call__(
        self, item: EvidenceItem, collector: Collector[Any], scope: Scope, params: CollectorParams
    ) -> Evidence:
        host = scope.host.name if scope.host is not None and collector.needs_host else None
        unit = scope.unit.unit if scope.unit is not None and collector.needs_host else None
        key = (collector.name, host, unit, params.model_dump_json())
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

    async def _run(
        self, collector: Collector[Any], scope: Scope, params: CollectorParams
    ) -> Evidence:
        if collector.needs_host and scope.host is None:
            message = "no host to run it on (the endpoint has no units and no host)"
            return Evidence(collector=collector.name, error=message)
        context = CollectContext(
            scope=scope,
            executor=self._executor,
            timeout=self._timeout,
            http=self._http,
            last_ok_at=self._last_ok_at,
        )
        deadline = self._timeout * DEADLINE_FACTOR
        try:
            async with asyncio.timeout(deadline.total_seconds()):
                return await collector.run(context, params)
        except TimeoutError:
            message = f"the collector did not finish within {format_duration(deadline)}"
            return Evidence(collector=collector.name, error=message)
        except Exception as exc:  # a collector bug must not end the diagnosis
            message = f"the collector failed: {type(exc).__name__}: {exc}"
            return Evidence(collector=collector.name, error=message)


async def diagnose(
    endpoint: Endpoint,
    *,
    config: FleetConfig,
    state: str,
    trigger: ProbeResult | None,
    playbook: Playbook,
    executor: Executor,
    http: httpx.AsyncClient,
    timeout: timedelta,
    collectors: Collectors | None = None,
    last_ok_at: datetime | None = None,
    event: UnitSignal | None = None,
) -> Diagnosis:
    """Gather evidence for `endpoint` (in `state`, after `trigger`) and match the playbook.
    `last_ok_at` (when the endpoint last passed a check) reaches the collectors through their
    context: the journal reads only what was logged since."""
    gather = _CachedGather(executor=executor, http=http, timeout=timeout, last_ok_at=last_ok_at)
    matched, evaluations = await match_rules(
        playbook.rules,
        scopes_of(endpoint, config),
        state=state,
        trigger=trigger,
        collectors=collectors_or_default(collectors),
        gather=gather,
        event=event,
    )
    return Diagnosis(
        endpoint=endpoint.name,
        state=str(state),
        matched=matched,
        evaluations=evaluations,
        evidence=tuple(gather.runs),
    )
