"""One doctor run: log in to every host at once, ask sudo about every command the rules need
(one round trip per host), then run every check over its subjects, all in parallel. Nothing
it runs changes anything (no command is `mutating`; sudo is only asked, with `-l`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from itertools import chain

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Host
from supervisor.core.clock import Clock
from supervisor.core.httpclient import HttpClient
from supervisor.execute.base import Executor
from supervisor.trust.doctor import endpoints, fleet, hosts, rules
from supervisor.trust.doctor.context import DoctorContext, Login, sudo_list_script
from supervisor.trust.doctor.model import DoctorRun, Finding
from supervisor.trust.doctor.registry import Check, Over, build
from supervisor.trust.load import InForce

CHECKS: tuple[Check, ...] = build((hosts, endpoints, rules, fleet))


class UnknownNameError(ValueError):
    """A NAME that is neither an endpoint nor a host of the config."""


def chosen(config: FleetConfig, names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(endpoints, hosts) to check: all of them, or those named (a host brings its endpoints,
    an endpoint its hosts)."""
    if not names:
        return list(config.endpoints), list(config.hosts)
    picked: dict[str, None] = {}
    machines: dict[str, None] = {}
    for name in names:
        if name in config.endpoints:
            picked[name] = None
        elif name in config.hosts:
            machines[name] = None
            picked.update(
                dict.fromkeys(e.name for e in config.endpoints.values() if name in e.hosts())
            )
        else:
            known = ", ".join([*config.endpoints, *config.hosts])
            raise UnknownNameError(f"no endpoint or host {name!r} (known: {known})")
    for endpoint in picked:
        machines.update(dict.fromkeys(config.endpoints[endpoint].hosts()))
    return list(picked), [h for h in config.hosts if h in machines]


async def _login(ctx: DoctorContext, host: Host) -> Login:
    result = await ctx.run(host, ["uname", "-sr"])
    if result.ok:
        return Login(host=host, system=result.stdout.strip())
    said = result.error or (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[0]
    return Login(host=host, error=said)


async def _ask_sudo(ctx: DoctorContext, login: Login) -> None:
    """`sudo -n -l -- COMMAND` for every command the host's user would run as root."""
    host = login.host
    if not login.ok or login.root:
        return
    examples = list(dict.fromkeys(need.shape.example() for need in ctx.needs.on(host.name)))
    if not examples:
        return
    result = await ctx.run(host, ["sh", "-c", sudo_list_script(examples)])
    answers = result.stdout.split() if result.ok else []
    ctx.permitted[host.name] = {
        example: index < len(answers) and answers[index] == "0"
        for index, example in enumerate(examples)
    }


async def run_doctor(
    found: InForce,
    *,
    executor: Executor,
    http: HttpClient,
    clock: Clock,
    names: Sequence[str] = (),
    key_problems: Mapping[str, str] | None = None,
) -> DoctorRun:
    config = found.config
    started, at = time.monotonic(), clock.now()
    endpoint_names, host_names = chosen(config, names)
    ctx = DoctorContext(
        config=config, needs=found.needs, rules=found.playbook.rules,
        executor=executor, http=http, clock=clock, key_problems=key_problems or {},
    )  # fmt: skip
    machines = [config.hosts[name] for name in host_names]
    logins = await asyncio.gather(*(_login(ctx, host) for host in machines))
    ctx.logins = {login.host.name: login for login in logins}
    await asyncio.gather(*(_ask_sudo(ctx, login) for login in logins))
    jobs: list[asyncio.Future[list[Finding]] | asyncio.Task[list[Finding]]] = []
    for check in CHECKS:
        if check.over is Over.HOST:
            subjects: list[object] = [login for login in logins if login.ok or check.name == "ssh"]
        elif check.over is Over.ENDPOINT:
            subjects = [config.endpoints[name] for name in endpoint_names]
        else:
            subjects = [None] if not names else []
        for subject in subjects:
            args = (ctx,) if subject is None else (ctx, subject)
            jobs.append(asyncio.ensure_future(check.run(*args)))
    results = await asyncio.gather(*jobs)
    order = {name: index for index, name in enumerate([*host_names, *endpoint_names, "store"])}
    findings = sorted(chain.from_iterable(results), key=lambda f: order.get(f.subject, len(order)))
    return DoctorRun(at=at, took_s=time.monotonic() - started, findings=tuple(findings))
