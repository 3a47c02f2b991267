"""The one diagnose/plan service: gather evidence and match the playbook for an endpoint, and run
a rule's steps against a recording executor to see what they would do. The repair runner, the
`diagnose` command and the chat's `/diagnose` all use it (the daemon's instance reads its live
playbook; the command's reads the playbook folder)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import Clock
from supervisor.core.events import ProbeResult, Tier, UnitSignal
from supervisor.core.httpclient import HttpClient
from supervisor.execute.base import Executor
from supervisor.execute.dryrun import DryRunExecutor
from supervisor.playbook.actions.base import Action
from supervisor.playbook.diagnose import diagnose
from supervisor.playbook.facts import Facts
from supervisor.playbook.loader import Playbook
from supervisor.playbook.matching import Latest
from supervisor.playbook.model import Step
from supervisor.playbook.results import DiagnosisResult
from supervisor.repair.steps import StepEnv, StepRun, StepsResult, run_steps

Prober = Callable[[Endpoint, Tier], Awaitable[ProbeResult]]
Scopes = Sequence[tuple[Any, Facts]]


class DiagnosisService:
    """Diagnoses and plans against `playbook()` (called each time: a reload is seen at once)."""

    def __init__(
        self,
        *,
        config: FleetConfig,
        playbook: Callable[[], Playbook],
        executor: Executor,
        http: HttpClient,
        clock: Clock,
        actions: Mapping[str, Action[Any]],
        prober: Prober,
    ) -> None:
        self.config = config  #: replaced by a config reload
        self.playbook = playbook
        self.executor = executor
        self.http = http
        self.clock = clock
        self.actions = actions
        self.prober = prober

    async def diagnose(
        self,
        endpoint: Endpoint,
        *,
        state: str,
        trigger: ProbeResult | None,
        last_ok_at: datetime | None,
        event: UnitSignal | None = None,
        settle: bool = False,
        latest: Callable[[], Latest] | None = None,
    ) -> DiagnosisResult:
        """Evidence gathered now for `endpoint` in `state` (after `trigger`, and the unit death
        systemd reported, if any), and the rule that matches, if any. With `settle`, a restart
        systemd or launchd is about to make is waited for first (`latest`: what to read then)."""
        return await diagnose(
            endpoint,
            config=self.config,
            state=state,
            trigger=trigger,
            playbook=self.playbook(),
            executor=self.executor,
            http=self.http,
            timeout=self.config.remediation.evidence_timeout,
            last_ok_at=last_ok_at,
            event=event,
            settle=settle,
            latest=latest,
            clock=self.clock,
        )

    async def probe_now(self, endpoint: Endpoint) -> list[ProbeResult]:
        """Liveness, then the real check; for `health` kinds the URL is the one check."""
        tiers = [Tier.DEEP] if endpoint.kind == "health" else [Tier.LIVENESS, Tier.DEEP]
        return [await self.prober(endpoint, tier) for tier in tiers]

    def env(
        self,
        endpoint: Endpoint,
        executor: Executor,
        *,
        dry_run: bool,
        probe: Callable[[], Awaitable[ProbeResult]] | None = None,
    ) -> StepEnv:
        """Where a rule's steps run: `probe` is how a step waits for health (default: probe
        the endpoint directly)."""
        return StepEnv(
            endpoint=endpoint,
            hosts=self.config.hosts,
            executor=executor,
            timeout=self.config.remediation.command_timeout,
            dry_run=dry_run,
            clock=self.clock,
            probe=probe or (lambda: self.prober(endpoint, Tier.DEEP)),
            actions=self.actions,
        )

    async def dry_run(
        self,
        endpoint: Endpoint,
        steps: Sequence[Step],
        *,
        matched: Scopes,
        scopes: Scopes,
        on_run: Callable[[StepRun], Awaitable[None]],
    ) -> StepsResult:
        """The steps run against a recording executor: reads run for real, writes are listed
        (each run is handed to `on_run`), nothing is changed."""
        planner = DryRunExecutor(self.executor)
        env = self.env(endpoint, planner, dry_run=True)
        return await run_steps(steps, env=env, matched=matched, scopes=scopes, on_run=on_run)
