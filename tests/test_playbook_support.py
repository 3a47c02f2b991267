"""A tiny collector and action registry for the playbook tests, independent of the real ones.

The collectors run real commands through the `LocalExecutor`: a unit's "status" is a
`key=value` file under a folder per host, read with `cat`; `path_exists` runs `test -e`. Each
registry counts its runs, so the tests can prove what was cached. The tests at the bottom
check the helpers themselves.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from supervisor.config.fields import Duration
from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.httpclient import HttpClient
from supervisor.execute.local import LocalExecutor
from supervisor.playbook.actions.base import (
    Action,
    ActionContext,
    ActionOutcome,
    ActionParams,
    Target,
)
from supervisor.playbook.actions.base import NoParams as NoActionParams
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    Collector,
    CollectorParams,
    FactValue,
    NoEvidenceParams,
)

STATUS_FACTS = {
    "active_state": "active, failed ...",
    "result": "success, exit-code ...",
    "exec_main_status": "exit status",
    "n_restarts": "restarts",
    "exec_start_script": "the script",
    "drop_in_paths": "drop-ins",
}


class PathParams(CollectorParams):
    path: str
    in_container: bool = False


class PortParams(CollectorParams):
    port: int


class PatternParams(CollectorParams):
    pattern: str


class CommandParams(ActionParams):
    command: str


class WaitParams(ActionParams):
    within: Duration


class KillParams(ActionParams):
    pattern: str
    port: int | None = None


def _value(text: str) -> FactValue:
    if text.lstrip("-").isdigit():
        return int(text)
    if "," in text:
        return tuple(part for part in text.split(",") if part)
    return text


@dataclass
class FileCollectors:
    """Collectors over files in `root/HOST/UNIT.status`; `runs` counts (collector, scope)."""

    root: Path
    runs: Counter[tuple[str, str]] = field(default_factory=Counter)

    def status_file(self, host: str, unit: str) -> Path:
        return self.root / host / f"{unit}.status"

    def write_status(self, host: str, unit: str, **facts: object) -> None:
        path = self.status_file(host, unit)
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            f"{key}={','.join(map(str, v)) + ',' if isinstance(v, list) else v}"
            for key, v in facts.items()
        ]
        path.write_text("\n".join(lines) + "\n")

    async def unit_status(self, ctx: CollectContext, params: NoEvidenceParams) -> CollectedEvidence:
        self.runs["unit_status", ctx.scope.label] += 1
        if ctx.scope.unit is None or ctx.scope.host is None:
            return CollectedEvidence(collector="unit_status", error="no unit in this scope")
        path = self.status_file(ctx.scope.host.name, ctx.scope.unit.unit)
        result = await ctx.executor.run(ctx.scope.host, ["cat", str(path)], timeout=ctx.timeout)
        if not result.ok:
            error = f"cat failed: exit {result.exit_status}: {result.stderr.strip()}"
            return CollectedEvidence(collector="unit_status", commands=(result,), error=error)
        facts = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        values = {key: _value(text) for key, text in facts.items()}
        return CollectedEvidence(collector="unit_status", facts=values, commands=(result,))

    async def path_exists(self, ctx: CollectContext, params: PathParams) -> CollectedEvidence:
        self.runs["path_exists", ctx.scope.label] += 1
        assert ctx.scope.host is not None
        result = await ctx.executor.run(
            ctx.scope.host, ["test", "-e", params.path], timeout=ctx.timeout
        )
        return CollectedEvidence(
            collector="path_exists", facts={"exists": result.exit_status == 0}, commands=(result,)
        )

    async def listeners(self, ctx: CollectContext, params: PortParams) -> CollectedEvidence:
        self.runs["listeners", ctx.scope.label] += 1
        return CollectedEvidence(collector="listeners", facts={"count": 0, "pids": ()})

    async def crashes(self, ctx: CollectContext, params: NoEvidenceParams) -> CollectedEvidence:
        self.runs["crashes", ctx.scope.label] += 1
        raise RuntimeError("a bug in the collector")

    async def endpoint_only(self, ctx: CollectContext, params: PatternParams) -> CollectedEvidence:
        self.runs["endpoint_only", ctx.scope.label] += 1
        return CollectedEvidence(
            collector="endpoint_only",
            facts={"text": f"{ctx.scope.endpoint.name}: {params.pattern}"},
        )

    def collectors(self) -> dict[str, Collector[Any]]:
        found: list[Collector[Any]] = [
            Collector(
                name="unit_status",
                params=NoEvidenceParams,
                run=self.unit_status,
                doc="status file",
                facts=STATUS_FACTS,
            ),
            Collector(
                name="path_exists",
                params=PathParams,
                run=self.path_exists,
                doc="test -e",
                facts={"exists": "there"},
            ),
            Collector(
                name="listeners",
                params=PortParams,
                run=self.listeners,
                doc="ss",
                facts={"count": "n", "pids": "pids"},
            ),
            Collector(
                name="crashes",
                params=NoEvidenceParams,
                run=self.crashes,
                doc="raises",
                facts={"never": "never"},
            ),
            Collector(
                name="endpoint_only",
                params=PatternParams,
                run=self.endpoint_only,
                doc="no host",
                facts={"text": "text"},
                needs_host=False,
            ),
        ]
        return {collector.name: collector for collector in found}


async def _done(ctx: ActionContext, params: ActionParams) -> ActionOutcome:
    return ActionOutcome(ok=True, summary="done")


def _action(name: str, params: type[ActionParams], target: Target, *targets: Target) -> Action[Any]:
    accepted = frozenset(targets) if targets else frozenset(Target)
    return Action(name=name, params=params, run=_done, target=target, doc=name, targets=accepted)


def action_registry() -> dict[str, Action[Any]]:
    found = [
        _action("restart_units", NoActionParams, Target.UNITS, Target.UNIT, Target.UNITS),
        _action("write_execstart_dropin", CommandParams, Target.UNIT, Target.UNIT),
        _action("wait_healthy", WaitParams, Target.ENDPOINT, Target.ENDPOINT),
        _action("kill_processes", KillParams, Target.HOST),
    ]
    return {action.name: action for action in found}


def fleet(
    units: list[UnitRef], *, kind: str = "openai", host: str | None = None
) -> tuple[Endpoint, FleetConfig]:
    """A `ds4` endpoint with these units on local hosts named after the units' hosts."""
    names = {unit.host for unit in units} | ({host} if host else set())
    hosts = {name: Host(name=name, local=True) for name in sorted(names)}
    endpoint = Endpoint.model_validate(
        {"name": "ds4", "kind": kind, "url": "http://127.0.0.1:9", "units": units, "host": host}
    )
    config = FleetConfig(source=Path("fleet.yaml"), hosts=hosts, endpoints={"ds4": endpoint})
    return endpoint, config


async def test_status_collector_reads_a_real_file(tmp_path: Path) -> None:
    registry = FileCollectors(tmp_path)
    registry.write_status(
        "spark1", "head.service", exec_main_status=127, drop_in_paths=["/a", "/b"]
    )
    endpoint, config = fleet([UnitRef(host="spark1", unit="head.service")])
    from supervisor.playbook.scopes import scopes_of

    scope = scopes_of(endpoint, config)[0]
    async with HttpClient() as http:
        context = CollectContext(
            scope=scope, executor=LocalExecutor(), timeout=timedelta(seconds=5), http=http
        )
        evidence = await registry.collectors()["unit_status"].run(context, NoEvidenceParams())
    assert evidence.facts == {"exec_main_status": 127, "drop_in_paths": ("/a", "/b")}
    assert evidence.commands[0].command == f"cat {registry.status_file('spark1', 'head.service')}"
