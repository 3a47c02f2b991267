"""Running a rule's steps: resolve each step's targets, fill its params from the scope's facts,
validate them against the action's own model, run the action, record the outcome.

The first step that fails stops the repair; what it ran and why it stopped are in the outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.clock import Clock
from supervisor.core.events import ProbeResult
from supervisor.execute.base import Executor
from supervisor.playbook.actions.base import Action, ActionContext, ActionOutcome, Target
from supervisor.playbook.evidence.base import Scope
from supervisor.playbook.facts import Facts
from supervisor.playbook.model import Step
from supervisor.playbook.params import ParamsError, resolve_params


@dataclass(frozen=True, kw_only=True)
class StepRun:
    """One action run on one target."""

    index: int  #: the step's position in the rule (0-based)
    action: str
    target: str  #: `vllm-ds4-head.service@spark1`, `spark2`, `ds4`
    outcome: ActionOutcome


@dataclass(frozen=True, kw_only=True)
class StepsResult:
    ok: bool
    runs: tuple[StepRun, ...]
    needs_person: str = ""  #: set when a step asked for a person or refused to act
    stopped: str = ""  #: why it stopped early, in one line


@dataclass(frozen=True, kw_only=True)
class StepEnv:
    endpoint: Endpoint
    hosts: Mapping[str, Host]
    executor: Executor
    timeout: timedelta
    dry_run: bool
    clock: Clock
    probe: Callable[[], Awaitable[ProbeResult]]
    actions: Mapping[str, Action[Any]]


def _units(env: StepEnv) -> tuple[tuple[Host, UnitRef], ...]:
    return tuple((env.hosts[u.host], u) for u in env.endpoint.units)


def targets(
    target: Target, matched: Sequence[tuple[Scope, Facts]], scopes: Sequence[tuple[Scope, Facts]]
) -> list[tuple[str, Host | None, UnitRef | None, Facts]]:
    """(label, host, unit, facts) for every call a step makes on `target`."""
    first = matched[0][1] if matched else Facts()
    if target is Target.UNIT:
        return [(s.label, s.host, s.unit, f) for s, f in matched if s.unit is not None]
    if target in (Target.HOST, Target.HOSTS):
        chosen = matched if target is Target.HOST else scopes
        seen: dict[str, tuple[str, Host | None, UnitRef | None, Facts]] = {}
        for scope, facts in chosen:
            if scope.host is not None and scope.host.name not in seen:
                seen[scope.host.name] = (scope.host.name, scope.host, None, facts)
        return list(seen.values())
    endpoint_scope = matched[0][0] if matched else scopes[0][0]
    hosts = {s.host.name: s.host for s, _ in scopes if s.host is not None}
    only_host = next(iter(hosts.values())) if len(hosts) == 1 else None
    return [(endpoint_scope.endpoint.name, only_host, None, first)]


async def run_steps(
    steps: Sequence[Step],
    *,
    env: StepEnv,
    matched: Sequence[tuple[Scope, Facts]],
    scopes: Sequence[tuple[Scope, Facts]],
    on_run: Callable[[StepRun], Awaitable[None]],
    on_start: Callable[[int, str, str], Awaitable[None]] | None = None,
) -> StepsResult:
    """Run `steps` in order; `on_start(index, action, target)` before each runs (so one cut
    off has its entry), `on_run` once it ran."""
    runs: list[StepRun] = []
    for index, step in enumerate(steps):
        action = env.actions[step.action]
        target = step.on or action.target
        for label, host, unit, facts in targets(target, matched, scopes):
            if on_start is not None:
                await on_start(index, step.action, label)
            outcome = await _one(action, step, env, host, unit, facts)
            run = StepRun(index=index, action=step.action, target=label, outcome=outcome)
            runs.append(run)
            await on_run(run)
            if not outcome.ok:
                return StepsResult(
                    ok=False,
                    runs=tuple(runs),
                    needs_person=outcome.needs_person,
                    stopped=f"step {index + 1} ({step.action} on {label}): {outcome.summary}",
                )
    return StepsResult(ok=True, runs=tuple(runs))


def action_context(
    env: StepEnv,
    *,
    host: Host | None = None,
    unit: UnitRef | None = None,
    facts: Facts | None = None,
) -> ActionContext:
    """What an action (or the runner acting on its own) runs with in `env`."""
    return ActionContext(
        endpoint=env.endpoint,
        host=host,
        unit=unit,
        units=_units(env),
        executor=env.executor,
        timeout=env.timeout,
        facts=facts.values if facts is not None else {},
        dry_run=env.dry_run,
        clock=env.clock,
        probe=env.probe,
    )


async def _one(
    action: Action[Any],
    step: Step,
    env: StepEnv,
    host: Host | None,
    unit: UnitRef | None,
    facts: Facts,
) -> ActionOutcome:
    try:
        params = resolve_params(action.params, step.params, facts)
    except ParamsError as exc:
        text = f"cannot fill params: {exc}"
        return ActionOutcome(ok=False, summary=text, needs_person=text)
    ctx = action_context(env, host=host, unit=unit, facts=facts)
    try:
        return await action.run(ctx, params)
    except Exception as exc:  # a broken action is recorded, never fatal
        return ActionOutcome(ok=False, summary=f"action {action.name} failed: {exc!r}")
