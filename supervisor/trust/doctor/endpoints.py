"""Endpoint checks: liveness, a real completion, the model served, the /metrics series the
busy/hung judge reads, and what the playbook will act on: the units (state, ExecStart and
whether its target exists, in the container where there is one; a launchd job and its domain),
the known-good script, the container."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from functools import partial

from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.events import ProbeOutcome
from supervisor.core.httpclient import HttpClient, HttpError, WholeReply, failure_reason
from supervisor.judge.progress.load import MetricsFormatError, parse_vllm_metrics
from supervisor.judge.progress.read import METRICS_KINDS
from supervisor.playbook.evidence.execstart import parse_exec_start, script_of, split_argv
from supervisor.playbook.evidence.launchctl import job_target, print_argv
from supervisor.playbook.evidence.systemd import parse_unit_status
from supervisor.probe import CHECKS, ProbeContext, ProbeError
from supervisor.probe.http import one_line
from supervisor.probe.ondemand import gentle
from supervisor.trust.doctor.context import DoctorContext
from supervisor.trust.doctor.model import Finding, fail, ok, warn
from supervisor.trust.doctor.registry import Over, check

#: the longest a doctor's real completion may take, and the tokens it asks for
COMPLETION_TIMEOUT_S = 8.0
COMPLETION_TOKENS = 64
HTTP_TIMEOUT_S = 4.0
NO_DOMAIN = "Could not find domain for user"


def _quick(endpoint: Endpoint) -> Endpoint:
    probe = endpoint.probe.model_copy(
        update={
            "timeout": min(endpoint.probe.timeout, timedelta(seconds=COMPLETION_TIMEOUT_S)),
            "max_tokens": min(endpoint.probe.max_tokens, COMPLETION_TOKENS),
        }
    )
    return endpoint.model_copy(update={"probe": probe})


async def _probe(
    ctx: DoctorContext, endpoint: Endpoint, deep: bool
) -> tuple[ProbeOutcome, str, str]:
    """(outcome, what it said, the reasoning field) of the kind's liveness or real check (on
    demand: without loading the model)."""
    kind = CHECKS[endpoint.kind]
    run = kind.deep if deep else kind.liveness
    if deep and endpoint.loader and not endpoint.keep_warm:  # on demand: never loads a model
        run = partial(gentle, deep=run)
    try:
        async with asyncio.timeout(COMPLETION_TIMEOUT_S), HttpClient() as probe_http:
            found = await run(ProbeContext(_quick(endpoint), probe_http, ctx.clock))
    except ProbeError as exc:
        return exc.outcome, exc.reason, ""
    except TimeoutError:
        return ProbeOutcome.FAIL, f"no answer within {COMPLETION_TIMEOUT_S:g}s", ""
    except HttpError as exc:
        return ProbeOutcome.FAIL, failure_reason(exc), ""
    said = found.reason or found.detail or found.check
    return found.outcome, said, found.reasoning_field


@check("key", over=Over.ENDPOINT, doc="the API key can be read and the server takes it")
async def key(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    if not endpoint.keyed:
        return []
    name, source = endpoint.name, endpoint.key_source
    if problem := ctx.key_problems.get(name):
        if endpoint.api_key_env is not None:
            fix = f"set {source} in the daemon's unit (Environment= or EnvironmentFile=)"
        else:
            fix = f"fix {source} for the daemon's user"
        return [fail(name, "key", problem, fix)]
    path = "/api/tags" if endpoint.kind == "ollama" else "/v1/models"
    try:
        response = await _get(ctx, endpoint, path)
    except (HttpError, TimeoutError) as exc:
        up = f"is the server up at {endpoint.url}?"
        return [fail(name, "key", f"{path}: {_failed(exc)}", up)]
    if response.status_code in (401, 403):
        said = f"the server refused the key from {source} (HTTP {response.status_code})"
        return [fail(name, "key", said, f"put the key the server expects in {source}")]
    return [ok(name, "key", f"the server takes the key from {source}")]


@check("route", over=Over.ENDPOINT, doc="a route's router lists its model")
async def route(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    if not endpoint.depends_on():
        return []
    name = endpoint.name
    through = ", ".join(
        f"{how} {other}"
        for how, other in (("via", endpoint.via), ("backend", endpoint.backend))
        if other is not None
    )
    try:
        served = await _served(ctx, endpoint)
    except (HttpError, TimeoutError, ValueError) as exc:
        fix = f"is the router up at {endpoint.url}?"
        return [fail(name, "route", f"cannot list the models ({through}): {_failed(exc)}", fix)]
    if endpoint.model is not None and endpoint.model not in served:
        listing = ", ".join(served) or "none"
        said = f"the router does not list {endpoint.model} (it lists: {listing})"
        return [fail(name, "route", said, f"add {endpoint.model} to the router's models")]
    return [ok(name, "route", f"{through}: the router lists {endpoint.model}")]


@check("liveness", over=Over.ENDPOINT, doc="/health, /v1/models or /api/tags answers")
async def liveness(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    outcome, said, _ = await _probe(ctx, endpoint, deep=False)
    if outcome is ProbeOutcome.OK:
        return [ok(endpoint.name, "liveness", f"{endpoint.url} answers")]
    return [fail(endpoint.name, "liveness", said, f"is the server up at {endpoint.url}?")]


@check("completion", over=Over.ENDPOINT, doc="a real completion (and which reasoning field)")
async def completion(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    outcome, said, field = await _probe(ctx, endpoint, deep=True)
    name = endpoint.name
    if outcome is ProbeOutcome.IDLE:
        return [ok(name, "completion", f"on demand: {said} (`probe {name}` loads it)")]
    if outcome is not ProbeOutcome.OK:
        return [fail(name, "completion", said, "fix the server (or the model name) first")]
    if endpoint.kind not in ("openai", "ollama"):
        return [ok(name, "completion", f"the real call passed: {said}")]
    if field:
        return [ok(name, "completion", f"reasoning came back in `{field}`")]
    if endpoint.expect_reasoning:
        return [
            fail(
                name,
                "completion",
                "no reasoning text",
                f"set endpoints.{name}.expect_reasoning: false, "
                "or serve it with a reasoning parser",
            )
        ]
    return [ok(name, "completion", "answered (no reasoning text; none expected)")]


async def _get(ctx: DoctorContext, endpoint: Endpoint, path: str) -> WholeReply:
    """GET `path` of the endpoint within HTTP_TIMEOUT_S; raises `TimeoutError` or
    `HttpError`."""
    async with asyncio.timeout(HTTP_TIMEOUT_S):
        return await ctx.http.get(f"{endpoint.url}{path}", headers=endpoint.request_headers())


def _failed(exc: Exception) -> str:
    """What a GET that raised says: the HTTP client's words, a timeout's, or the text's."""
    if isinstance(exc, HttpError):
        return failure_reason(exc)
    if isinstance(exc, TimeoutError):
        return f"no answer within {HTTP_TIMEOUT_S:g}s"
    return one_line(str(exc)) or type(exc).__name__


async def _served(ctx: DoctorContext, endpoint: Endpoint) -> list[str]:
    """The model ids the server lists; raises `HttpError`, `TimeoutError` or
    `ValueError`."""
    ollama = endpoint.kind == "ollama"
    path = "/api/tags" if ollama else "/v1/models"
    url = f"{endpoint.url}{path}"
    response = await _get(ctx, endpoint, path)
    if response.status_code != 200:
        raise ValueError(f"HTTP {response.status_code} from {url}")
    body = response.json()
    items = body.get("models" if ollama else "data") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise ValueError(f"{url} lists no models")
    key = "name" if ollama else "id"
    return [str(item.get(key)) for item in items if isinstance(item, dict)]


@check("model", over=Over.ENDPOINT, doc="the configured model is the one the server lists")
async def model(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    if endpoint.model is None:
        return []
    name = endpoint.name
    try:
        served = await _served(ctx, endpoint)
    except (HttpError, TimeoutError, ValueError) as exc:
        return [
            fail(
                name,
                "model",
                f"cannot list the models: {_failed(exc)}",
                f"is the server up at {endpoint.url}?",
            )
        ]
    if endpoint.model in served:
        return [ok(name, "model", f"{endpoint.model} is served")]
    listing = ", ".join(served) or "none"
    return [
        fail(
            name,
            "model",
            f"{endpoint.model} is not served (served: {listing})",
            f"set endpoints.{name}.model to one of: {listing}",
        )
    ]


async def _version(ctx: DoctorContext, endpoint: Endpoint) -> str:
    try:
        response = await _get(ctx, endpoint, "/version")
        body = response.json() if response.status_code == 200 else {}
    except (HttpError, TimeoutError, ValueError):
        return ""
    version = body.get("version") if isinstance(body, dict) else None
    return f"vLLM {version}" if isinstance(version, str) else ""


def _launchd_only(ctx: DoctorContext, endpoint: Endpoint) -> bool:
    hosts = [ctx.host(name) for name in endpoint.hosts()]
    return bool(hosts) and all(h is not None and h.service_manager == "launchd" for h in hosts)


@check("metrics", over=Over.ENDPOINT, doc="the /metrics series the busy/hung judge reads")
async def check_metrics(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    if endpoint.kind not in METRICS_KINDS:
        return []
    name = endpoint.name
    version = await _version(ctx, endpoint)
    server = f" ({version})" if version else ""
    try:
        response = await _get(ctx, endpoint, "/metrics")
    except (HttpError, TimeoutError) as exc:
        return [
            fail(
                name,
                "metrics",
                f"/metrics: {_failed(exc)}",
                f"is the server up at {endpoint.url}?",
            )
        ]
    if response.status_code == 404 and _launchd_only(ctx, endpoint):
        return [
            ok(
                name,
                "metrics",
                "no /metrics (mlx_lm exports none): busy and hung are told by time only",
            )
        ]
    if response.status_code != 200:
        return [
            warn(
                name,
                "metrics",
                f"/metrics answers HTTP {response.status_code}{server}: "
                "busy and hung cannot be told apart",
                "serve vLLM's /metrics (do not pass --disable-log-stats)",
            )
        ]
    try:
        load = parse_vllm_metrics(response.text, at=ctx.clock.now())
    except MetricsFormatError as exc:
        return [
            fail(
                name,
                "metrics",
                f"/metrics is unreadable: {exc}",
                "serve vLLM's Prometheus /metrics",
            )
        ]
    missing = [
        series
        for series, value in (
            ("vllm:generation_tokens_total", load.generation_tokens),
            ("vllm:num_requests_running", load.running),
        )
        if value is None
    ]
    if missing:
        return [
            fail(
                name,
                "metrics",
                f"/metrics{server} has no {' and no '.join(missing)}: "
                "busy cannot be told from hung",
                "run a vLLM that exports them (>= 0.6), "
                "or set probe.progress_window: 0s to judge by time",
            )
        ]
    return [
        ok(name, "metrics", f"vllm:generation_tokens_total and vllm:num_requests_running{server}")
    ]


def _first(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


async def _exists(ctx: DoctorContext, host: Host, path: str, container: str | None) -> bool | str:
    """Whether `path` exists (inside `container` when given); text: why it cannot tell."""
    argv = ["docker", "exec", container, "test", "-e", path] if container else ["test", "-e", path]
    result = await ctx.run(host, argv, sudo=bool(container))
    if result.ok:
        return True
    if not result.error and result.exit_status == 1 and not result.stderr.strip():
        return False
    return result.error or _first(result.stderr) or f"exit {result.exit_status}"


async def _systemd_unit(
    ctx: DoctorContext, endpoint: Endpoint, host: Host, unit: UnitRef
) -> list[Finding]:
    label = f"unit {unit.unit}@{host.name}"
    name = endpoint.name
    argv = [
        "systemctl",
        "show",
        unit.unit,
        "-p",
        "LoadState,ActiveState,SubState,ExecStart,User",
        "--no-pager",
    ]
    result = await ctx.run(host, argv)
    if not result.ok:
        said = result.error or _first(result.stderr) or f"exit {result.exit_status}"
        return [
            fail(
                name,
                label,
                f"systemctl show: {said}",
                f"can {host.user or 'the user'} run systemctl there?",
            )
        ]
    facts = parse_unit_status(result.stdout)
    if facts.get("load_state") != "loaded":
        return [
            fail(
                name,
                label,
                f"no unit {unit.unit} on {host.name} ({facts.get('load_state') or 'unknown'})",
                f"check endpoints.{name}.units[].unit "
                f"(`systemctl list-units --all 'vllm*'` on {host.name})",
            )
        ]
    state = f"{facts.get('active_state')} ({facts.get('sub_state')})"
    parsed = parse_exec_start(str(facts.get("exec_start", "")).split("\n")[0])
    target = parsed.script if parsed.script.startswith("/") else parsed.path
    container = parsed.container or None
    where = f" in {container}" if container else ""
    found = await _exists(ctx, host, target, container) if target else "no ExecStart"
    if found is True:
        return [ok(name, label, f"{state}; ExecStart {parsed.argv_text} ({target}{where} exists)")]
    if found is False:
        return [
            fail(
                name,
                label,
                f"{state}; ExecStart runs {target}{where}, which does not exist",
                "restore the launch script, or let the ghost-execstart rule "
                "repoint the unit at units[].known_good",
            )
        ]
    return [
        warn(
            name,
            label,
            f"{state}; cannot tell whether {target}{where} exists: {found}",
            f"grant `docker exec {container} test -e` "
            f"(fleet-supervisor sudoers --host {host.name})",
        )
    ]


async def _launchd_job(
    ctx: DoctorContext, endpoint: Endpoint, host: Host, unit: UnitRef
) -> list[Finding]:
    label = f"job {unit.unit}@{host.name}"
    name = endpoint.name
    try:
        job_target(unit)
    except ValueError as exc:
        return [fail(name, label, str(exc), f"set endpoints.{name}.units[].domain")]
    result = await ctx.run(host, print_argv(unit))
    text = f"{result.stderr}\n{result.stdout}"
    if result.ok:
        state = next(
            (
                line.split("=", 1)[1].strip()
                for line in result.stdout.splitlines()
                if line.strip().startswith("state =")
            ),
            "loaded",
        )
        return [ok(name, label, f"{unit.domain}/{unit.unit}: {state}")]
    if NO_DOMAIN in text:
        return [
            fail(
                name,
                label,
                f"{_first(text)}: nobody is logged in at {host.name}'s screen, "
                f"so {unit.domain} does not exist",
                "turn on automatic login for that user on the Mac "
                "(or make it a LaunchDaemon: domain system)",
            )
        ]
    if result.error:
        return [fail(name, label, result.error, "check the SSH login")]
    return [
        fail(
            name,
            label,
            _first(text) or f"exit {result.exit_status}",
            f"load it: launchctl bootstrap {unit.domain} {unit.plist or 'PLIST'} "
            "(or check units[].unit)",
        )
    ]


@check("units", over=Over.ENDPOINT, doc="each unit exists (state, ExecStart and its target)")
async def units(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    found: list[Finding] = []
    for unit in endpoint.units:
        host = ctx.host(unit.host)
        if host is None or ctx.reached(host.name) is None:
            continue  # `ssh` already says why
        if host.service_manager == "launchd":
            found.extend(await _launchd_job(ctx, endpoint, host, unit))
        else:
            found.extend(await _systemd_unit(ctx, endpoint, host, unit))
    return found


@check("container", over=Over.ENDPOINT, doc="each unit's container exists")
async def container(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    found: list[Finding] = []
    for unit in endpoint.units:
        host = ctx.host(unit.host)
        if not unit.container or host is None or ctx.reached(host.name) is None:
            continue
        label = f"container {unit.container}@{host.name}"
        argv = ["docker", "inspect", "--format", "{{.State.Status}}", unit.container]
        result = await ctx.run(host, argv, sudo=True)
        if result.ok:
            state = result.stdout.strip() or "no state"
            if state == "running":
                found.append(ok(endpoint.name, label, state))
            else:
                fix = f"start it: docker start {unit.container}"
                found.append(warn(endpoint.name, label, state, fix))
            continue
        said = _first(result.stderr) or result.error or f"exit {result.exit_status}"
        found.append(
            fail(
                endpoint.name,
                label,
                said,
                f"check endpoints.{endpoint.name}.units[].container "
                f"(`docker ps -a` on {host.name})",
            )
        )
    return found


def _script(known_good: str) -> str:
    words = split_argv(known_good)
    return script_of(words) if words else ""


@check("known_good", over=Over.ENDPOINT, doc="each unit's known-good launch script exists")
async def known_good(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    found: list[Finding] = []
    for unit in endpoint.units:
        host = ctx.host(unit.host)
        if not unit.known_good or host is None or ctx.reached(host.name) is None:
            continue
        label = f"known_good {unit.unit}@{host.name}"
        path = _script(unit.known_good)
        where = f" in {unit.container}" if unit.container else ""
        exists = await _exists(ctx, host, path, unit.container)
        if exists is True:
            found.append(ok(endpoint.name, label, f"{path}{where} exists"))
        elif exists is False:
            found.append(
                fail(
                    endpoint.name,
                    label,
                    f"{path}{where} does not exist",
                    f"fix endpoints.{endpoint.name}.units[].known_good",
                )
            )
        else:
            found.append(
                warn(
                    endpoint.name,
                    label,
                    f"cannot tell whether {path}{where} exists: {exists}",
                    f"fleet-supervisor sudoers --host {host.name}",
                )
            )
    return found
