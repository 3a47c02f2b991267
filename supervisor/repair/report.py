"""What `diagnose NAME` prints and the chat's `/diagnose` answers: the endpoint probed now, the
diagnosis with its evidence, and the matched rule's plan. Nothing is changed: with `dry_run` the
plan's commands come from running the rule's steps against a recording executor."""

from __future__ import annotations

from datetime import datetime

from supervisor.config.supervised import Endpoint
from supervisor.core.events import ProbeOutcome, ProbeResult
from supervisor.playbook.results import DiagnosisResult
from supervisor.repair.diagnosis import DiagnosisService
from supervisor.repair.rulefacts import matched_scopes
from supervisor.repair.steps import StepRun


def state_of(results: list[ProbeResult]) -> tuple[str, ProbeResult | None]:
    """The state probes say (down, degraded or healthy), and the probe that says so."""
    for result in results:
        if result.outcome is ProbeOutcome.FAIL:
            return "down", result
    for result in results:
        if result.outcome is ProbeOutcome.DEGRADED:
            return "degraded", result
    return "healthy", None


async def report(
    service: DiagnosisService,
    endpoint: Endpoint,
    *,
    state: str | None = None,
    dry_run: bool = True,
    last_ok_at: datetime | None = None,
) -> tuple[list[str], bool]:
    """The report's lines, and whether a rule matched."""
    found, trigger = state_of(await service.probe_now(endpoint))
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
    lines += [f"playbook problem: {p}" for p in service.playbook().lines()]
    # as the daemon would: a restart systemd or launchd is about to make is waited for first
    settle = state in ("down", "degraded")
    diagnosis = await service.diagnose(
        endpoint, state=state, trigger=trigger, last_ok_at=last_ok_at, settle=settle
    )
    lines += diagnosis.lines()
    lines += _evidence_lines(diagnosis)
    if diagnosis.matched is not None:
        lines += await _plan(service, endpoint, diagnosis, dry_run=dry_run)
    return lines, diagnosis.matched is not None


def _evidence_lines(diagnosis: DiagnosisResult) -> list[str]:
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
    service: DiagnosisService, endpoint: Endpoint, diagnosis: DiagnosisResult, *, dry_run: bool
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
            target = step.on or service.actions[step.action].target
            lines.append(f"  {index}. {step.action} on {target}")
        lines.append("  (--dry-run lists the exact commands)")
        return lines

    async def show(run: StepRun) -> None:
        verdict = "" if run.outcome.ok else f" (would stop: {run.outcome.summary})"
        lines.append(f"  {run.index + 1}. {run.action} on {run.target}{verdict}")
        for command in run.outcome.commands:
            if command.dry_run:
                lines.append(f"       [{command.host}] {command.command}")

    matched = [(r.scope, r.facts) for r in match.scopes]
    scopes = matched_scopes(diagnosis, rule.id)
    await service.dry_run(endpoint, rule.actions, matched=matched, scopes=scopes, on_run=show)
    lines.append("nothing was changed (dry run)")
    return lines
