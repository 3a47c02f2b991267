"""`diagnose NAME [--dry-run] [--state STATE]`: gather evidence now, say which rule matched and
why, and the plan. Nothing is changed: with `--dry-run` the plan's commands are computed by
running the rule's steps against a recording executor (reads run for real, writes are listed)."""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime
from typing import Any

from supervisor import logs
from supervisor.actions.registry import ACTIONS
from supervisor.cli.common import CliError, load, open_store
from supervisor.cli.probe import probe_now
from supervisor.clock import SystemClock
from supervisor.config import Endpoint, FleetConfig
from supervisor.events import Outcome, ProbeResult, Tier
from supervisor.executor.dryrun import DryRunExecutor
from supervisor.executor.fleet import FleetExecutor
from supervisor.playbook.diagnose import diagnose
from supervisor.playbook.facts import Facts
from supervisor.playbook.loader import load_playbook
from supervisor.playbook.results import Diagnosis
from supervisor.probes import make_client, run_probe
from supervisor.remediation.steps import StepEnv, StepRun, run_steps
from supervisor.store import StoreError, SubjectKind

STATES = ("down", "degraded", "unreachable")


def main(args: argparse.Namespace) -> int:
    config = load(args)
    if args.name not in config.endpoints:
        known = ", ".join(config.endpoints) or "none"
        raise CliError(f"no endpoint {args.name!r} in {config.source} (endpoints: {known})")
    logs.silence()
    lines, matched = asyncio.run(_run(config, config.endpoints[args.name], args))
    print("\n".join(lines))
    return 0 if matched else 1


def _state_of(results: list[ProbeResult]) -> tuple[str, ProbeResult | None]:
    for result in results:
        if result.outcome is Outcome.FAIL:
            return "down", result
    for result in results:
        if result.outcome is Outcome.DEGRADED:
            return "degraded", result
    return "healthy", None


async def _run(
    config: FleetConfig, endpoint: Endpoint, args: argparse.Namespace
) -> tuple[list[str], bool]:
    last_ok_at = await stored_last_ok(config, endpoint.name)
    return await _report(
        config, endpoint, state=args.state, dry_run=args.dry_run, last_ok_at=last_ok_at
    )


async def stored_last_ok(config: FleetConfig, name: str) -> datetime | None:
    """When the store last saw `name` pass a check (the journal is read from then), if known."""
    if not config.store.path.exists():
        return None
    try:
        store = await open_store(config)
    except StoreError:
        return None
    try:
        snapshot = await store.snapshot(SubjectKind.ENDPOINT, name)
    except StoreError:
        return None
    finally:
        await store.close()
    return snapshot.last_ok_at if snapshot is not None else None


async def report(
    config: FleetConfig,
    endpoint: Endpoint,
    *,
    state: str | None = None,
    dry_run: bool = True,
    last_ok_at: datetime | None = None,
) -> list[str]:
    """What `diagnose NAME` prints (the chat's `/diagnose`): nothing is changed."""
    lines, _matched = await _report(
        config, endpoint, state=state, dry_run=dry_run, last_ok_at=last_ok_at
    )
    return lines


async def _report(
    config: FleetConfig,
    endpoint: Endpoint,
    *,
    state: str | None,
    dry_run: bool,
    last_ok_at: datetime | None,
) -> tuple[list[str], bool]:
    results = await probe_now(endpoint)
    found, trigger = _state_of(results)
    lines = [f"probed now: {found}" + (f" ({trigger.reason})" if trigger else "")]
    if state:
        lines.append(f"diagnosing as {state} (--state)")
    else:
        state = found
    if state == "healthy":
        lines.append(
            "it is healthy: nothing to diagnose (use --state down to see what would happen)"
        )
        return lines, False
    playbook = load_playbook(config.playbook.path)
    lines += [f"playbook problem: {p}" for p in playbook.lines()]
    executor = FleetExecutor(config)
    async with make_client() as http:
        try:
            diagnosis = await diagnose(
                endpoint,
                config=config,
                state=state,
                trigger=trigger,
                playbook=playbook,
                executor=executor,
                http=http,
                timeout=config.remediation.evidence_timeout,
                last_ok_at=last_ok_at,
            )
            lines += diagnosis.lines()
            lines += _evidence_lines(diagnosis)
            if diagnosis.matched is not None:
                lines += await _plan(config, endpoint, diagnosis, executor, dry_run=dry_run)
        finally:
            await executor.close()
    return lines, diagnosis.matched is not None


def _evidence_lines(diagnosis: Diagnosis) -> list[str]:
    lines = ["evidence:"]
    for run in diagnosis.evidence:
        found = run.evidence
        status = found.error or ", ".join(f"{k}={_short(v)}" for k, v in found.facts.items())
        lines.append(f"  {run.collector} ({run.evidence_id}) on {run.scope}: {status}")
    return lines


def _short(value: object, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, str) else value.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def _plan(
    config: FleetConfig,
    endpoint: Endpoint,
    diagnosis: Diagnosis,
    executor: FleetExecutor,
    *,
    dry_run: bool,
) -> list[str]:
    match = diagnosis.matched
    assert match is not None
    rule = match.rule
    head = f"plan ({rule.mode} mode, {len(rule.actions)} steps"
    if rule.runbook:
        head += f", runbook {rule.runbook}"
    lines = [head + "):"]
    if not dry_run:
        for index, step in enumerate(rule.actions, 1):
            target = step.on or ACTIONS[step.action].target
            lines.append(f"  {index}. {step.action} on {target}")
        lines.append("  (--dry-run lists the exact commands)")
        return lines
    scopes: list[tuple[Any, Facts]] = []
    for evaluation in diagnosis.evaluations:
        if evaluation.rule_id == rule.id:
            scopes = [(r.scope, r.facts) for r in evaluation.scopes]
    planner = DryRunExecutor(executor)
    clock = SystemClock()

    async def probe() -> ProbeResult:
        async with make_client() as http:
            return await run_probe(endpoint, Tier.DEEP, http, clock=clock)

    async def show(run: StepRun) -> None:
        verdict = "" if run.outcome.ok else f" (would stop: {run.outcome.summary})"
        lines.append(f"  {run.index + 1}. {run.action} on {run.target}{verdict}")
        for command in run.outcome.commands:
            if command.dry_run:
                lines.append(f"       [{command.host}] {command.command}")

    env = StepEnv(
        endpoint=endpoint,
        hosts=config.hosts,
        executor=planner,
        timeout=config.remediation.command_timeout,
        dry_run=True,
        clock=clock,
        probe=probe,
        actions=ACTIONS,
    )
    matched = [(r.scope, r.facts) for r in match.scopes]
    await run_steps(rule.actions, env=env, matched=matched, scopes=scopes, on_run=show)
    lines.append("nothing was changed (dry run)")
    return lines
