"""Settle before diagnosing: a server whose engine died is watched until it exits, a unit
systemd (or launchd's KeepAlive) is about to restart is watched until that restart's outcome is
known, and the diagnosis reads the latest attempt, not the last death. systemd and launchd
cannot run here: their answers are captured shapes (`systemctl show`, `launchctl print`) played
by a scripted executor, on a clock that moves only when the wait pauses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.playbook.diagnose import diagnose
from supervisor.playbook.evidence.base import CollectContext, FactValue, Scope
from supervisor.playbook.evidence.restarts import (
    SHOW,
    Restart,
    RestartOutcome,
    engine_died,
    policy_fires,
    wait_for_exit,
    wait_for_restarts,
)
from supervisor.playbook.evidence.unitstate import timespan_s
from supervisor.playbook.loader import load_playbook
from supervisor.playbook.results import DiagnosisResult
from tests.test_evidence import (
    STATUS_PROPERTIES,
    Answer,
    FakeTime,
    ScriptedExecutor,
    data,
)

SPARK1 = Host(name="spark1", address="192.168.1.11")
MAC = Host(name="m3ultra", address="192.168.1.13", service_manager="launchd")
QWEN_UNIT = UnitRef(host="spark1", unit="vllm-qwen.service", known_good="/opt/known-good/q.sh")
KIMI_JOB = UnitRef(host="m3ultra", unit="com.fleet.mlx-kimi", domain="gui/501")
QWEN = Endpoint(
    name="qwen", kind="openai", url="http://192.168.1.11:8001", model="q", units=(QWEN_UNIT,)
)
KIMI = Endpoint(
    name="kimi", kind="openai", url="http://192.168.1.13:8013", model="k", units=(KIMI_JOB,)
)
SHOW_ARGV = ("systemctl", "show", "vllm-qwen.service", "-p", ",".join(SHOW), "--no-pager")
STATUS_ARGV = ("systemctl", "show", "vllm-qwen.service", "-p", STATUS_PROPERTIES, "--no-pager")
PRINT_ARGV = ("launchctl", "print", "gui/501/com.fleet.mlx-kimi")
KILLED, EXITED = 2, 1


def unit(
    *,
    active: str = "activating",
    sub: str = "auto-restart",
    code: int = KILLED,
    status: int = 9,
    restarts: int = 0,
    pid: int = 0,
    entered: int = 0,
    started: int = 1_000_000,
    restart: str = "on-failure",
    restart_sec: str = "3s",
) -> Answer:
    """`systemctl show -p SHOW` of the single node's unit (Restart=on-failure, RestartSec=3)."""
    values = {
        "ActiveState": active,
        "SubState": sub,
        "Result": "signal" if code == KILLED else ("exit-code" if status else "success"),
        "ExecMainCode": str(code),
        "ExecMainStatus": str(status),
        "MainPID": str(pid),
        "NRestarts": str(restarts),
        "ActiveEnterTimestampMonotonic": str(entered),
        "ExecMainStartTimestampMonotonic": str(started),
        "Restart": restart,
        "RestartUSec": restart_sec,
        "TimeoutStartUSec": "1min 30s",
    }
    return Answer(stdout="".join(f"{key}={values[key]}\n" for key in SHOW))


KILLED_RESTING = unit()  # SIGKILLed, resting RestartSec before systemd starts it again
RUNNING_1 = unit(active="active", sub="running", code=0, status=0, restarts=1, pid=4242,
                 entered=77_000_000, started=76_900_000)  # fmt: skip
EXITED_127 = unit(code=EXITED, status=127, restarts=1, started=76_900_000)  # no script found
#: the restart counted (its start job queued) but not yet run: the death's exit still shows
QUEUED = unit(restarts=1)
HEALTHY = unit(active="active", sub="running", code=0, status=0, pid=4000, entered=5_000_000)


def context(
    executor: ScriptedExecutor, time: FakeTime, scope: Scope, http: HttpClient
) -> CollectContext:
    ctx = CollectContext(scope=scope, executor=executor, timeout=timedelta(seconds=5), http=http)
    return replace(ctx, clock=time, pause=time.pause)


async def settle(
    answers: Sequence[Answer], http: HttpClient, *, argv: tuple[str, ...] = SHOW_ARGV
) -> tuple[tuple[Restart, ...], FakeTime, ScriptedExecutor]:
    time = FakeTime()
    executor = ScriptedExecutor(answers={}, sequences={argv: list(answers)})
    if argv == PRINT_ARGV:
        scope = Scope(endpoint=KIMI, host=MAC, unit=KIMI_JOB)
    else:
        scope = Scope(endpoint=QWEN, host=SPARK1, unit=QWEN_UNIT)
    found = await wait_for_restarts([context(executor, time, scope, http)])
    return found, time, executor


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    async with HttpClient() as client:
        yield client


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3s", 3.0), ("100ms", 0.1), ("1min 30s", 90.0), ("2h", 7200.0), ("infinity", None),
     ("", None), ("soon", None), ("0", 0.0)],
)  # fmt: skip
def test_systemd_timespans(text: str, seconds: float | None) -> None:
    assert timespan_s(text) == seconds


@pytest.mark.parametrize(
    ("policy", "code", "status", "fires"),
    [
        ("on-failure", KILLED, 9, True),  # SIGKILL is unclean
        ("on-failure", KILLED, 15, False),  # SIGTERM is clean
        ("on-failure", EXITED, 127, True),
        ("on-failure", EXITED, 0, False),  # vLLM's exit 0 after its engine died
        ("always", EXITED, 0, True),
        ("on-abnormal", EXITED, 1, False),
        ("on-abnormal", KILLED, 9, True),
        ("on-success", EXITED, 0, True),
        ("no", KILLED, 9, False),
    ],
)
def test_the_restart_policy_answers_the_death(
    policy: str, code: int, status: int, fires: bool
) -> None:
    facts: dict[str, FactValue] = {
        "restart": policy,
        "exec_main_code": code,
        "exec_main_status": status,
    }
    assert policy_fires(facts) is fires


async def test_a_unit_resting_before_a_restart_is_watched_until_the_next_attempt_fails(
    http: HttpClient,
) -> None:
    """The issue's first sequence: SIGKILLed, 3 s in auto-restart, then the restart exits 127."""
    answers = [KILLED_RESTING] * 7 + [RUNNING_1, EXITED_127]
    found, time, executor = await settle(answers, http)
    assert found == (
        Restart(
            scope="vllm-qwen.service@spark1",
            host="spark1",
            unit="vllm-qwen.service",
            before="signal 9, activating/auto-restart, 0 restarts",
            outcome=RestartOutcome.FAILED,
            after="status=127, activating/auto-restart, 1 restart",
            waited_s=4.0,
            bound_s=36.0,  # RestartSec 3 + start timeout (at most 30) + settle 2 + slack 1
        ),
    )
    assert len(executor.calls) == 9
    assert time.pauses == [0.5] * 8
    assert found[0].line() == (
        "waited 4.0s (of up to 36.0s) for the restart of vllm-qwen.service@spark1: failed again: "
        "status=127, activating/auto-restart, 1 restart "
        "(before: signal 9, activating/auto-restart, 0 restarts)"
    )


async def test_a_restart_counted_but_not_yet_run_is_waited_for(http: HttpClient) -> None:
    """systemd counts the restart when it queues the start job; until the job runs, the unit
    rests in auto-restart with the death's exit and the same main process start. That is not
    the restart failing again (a loaded lab host once showed it: `signal 9, 1 restart`)."""
    found, _, _ = await settle([KILLED_RESTING, QUEUED, QUEUED, EXITED_127], http)
    assert [(r.outcome, r.after, r.waited_s) for r in found] == [
        (RestartOutcome.FAILED, "status=127, activating/auto-restart, 1 restart", 1.5)
    ]


async def test_a_restart_that_stays_up_for_two_seconds_is_running(
    http: HttpClient,
) -> None:
    found, _, _ = await settle([KILLED_RESTING, KILLED_RESTING, RUNNING_1], http)
    assert [(r.outcome, r.after, r.waited_s) for r in found] == [
        (RestartOutcome.RUNNING, "no exit yet, active/running, 1 restart", 3.0)
    ]


@pytest.mark.parametrize(
    ("answers", "outcome", "waited"),
    [
        # five starts in ten seconds: systemd gives up
        ([KILLED_RESTING, unit(active="failed", sub="failed", code=EXITED, status=127,
                               restarts=5)], RestartOutcome.STOPPED, 0.5),
        # a person stopped it meanwhile
        ([KILLED_RESTING, unit(active="inactive", sub="dead")], RestartOutcome.STOPPED, 0.5),
        # systemd never restarts it within RestartSec + start timeout + settle
        ([KILLED_RESTING], RestartOutcome.NO_OUTCOME, 36.0),
        ([KILLED_RESTING, Answer(status=1, stderr="Failed to connect to bus\n")],
         RestartOutcome.UNREADABLE, 0.5),
    ],
)  # fmt: skip
async def test_a_restart_that_does_not_come_ends_the_wait(
    http: HttpClient, answers: list[Answer], outcome: RestartOutcome, waited: float
) -> None:
    found, time, _ = await settle(answers, http)
    assert [(r.outcome, r.waited_s) for r in found] == [(outcome, waited)]
    assert time.at - 1000.0 <= found[0].bound_s


@pytest.mark.parametrize(
    "answer",
    [
        HEALTHY,  # running, never restarted: nothing to wait for
        unit(active="failed", sub="failed", code=EXITED, status=1),  # systemd gave up already
        unit(active="inactive", sub="dead", code=EXITED, status=0, restart="on-failure"),
        unit(active="deactivating", sub="stop-sigterm", code=KILLED, status=15),  # clean
        Answer(status=1, stderr="Failed to connect to bus\n"),  # cannot ask: diagnose now
    ],
)
async def test_nothing_about_to_restart_is_read_once_and_not_waited_for(
    http: HttpClient, answer: Answer
) -> None:
    found, time, executor = await settle([answer], http)
    assert (found, time.pauses, len(executor.calls)) == ((), [], 1)


async def test_a_death_still_deactivating_whose_policy_restarts_it_is_waited_for(
    http: HttpClient,
) -> None:
    dying = unit(active="deactivating", sub="stop-sigterm", code=KILLED, status=9)
    found, _, _ = await settle([dying, KILLED_RESTING, EXITED_127], http)
    assert [r.outcome for r in found] == [RestartOutcome.FAILED]


def launchd(state: str, runs: int, last: str, pid: int = 0) -> Answer:
    """`launchctl print` of Kimi's job (the captured shape), KeepAlive throttling at 10 s."""
    lines = [
        "gui/501/com.fleet.mlx-kimi = {",
        "\tpath = /Users/op/Library/LaunchAgents/com.fleet.mlx-kimi.plist",
        f"\tstate = {state}",
        "\tprogram = /opt/homebrew/bin/python3",
        "\tminimum runtime = 10",
        f"\truns = {runs}",
        *([f"\tpid = {pid}"] if pid else []),
        f"\t{last}",
        "}",
    ]
    return Answer(stdout="\n".join(lines) + "\n")


async def test_a_launchd_keepalive_restart_is_waited_for_too(http: HttpClient) -> None:
    scheduled = launchd("spawn scheduled", 3, "last terminating signal = Killed: 9")
    exited = launchd("spawn scheduled", 4, "last exit code = 1")
    found, _, _ = await settle([scheduled, scheduled, exited], http, argv=PRINT_ARGV)
    assert [(r.outcome, r.before, r.after, r.bound_s) for r in found] == [
        (
            RestartOutcome.FAILED,
            "signal Killed: 9, spawn scheduled, 3 runs",
            "exit 1, spawn scheduled, 4 runs",
            13.0,  # throttle 10 + settle 2 + slack 1
        )
    ]
    running = launchd("running", 4, "last exit code = (never exited)", pid=812)
    found, _, _ = await settle([scheduled, running], http, argv=PRINT_ARGV)
    assert [r.outcome for r in found] == [RestartOutcome.RUNNING]


# --- the diagnosis: what it reads after the wait -----------------------------------------------


def config() -> FleetConfig:
    return FleetConfig(
        source=Path("fleet.yaml"), hosts={"spark1": SPARK1}, endpoints={"qwen": QWEN}
    )


def rule(rule_id: str, when: str, priority: int, extra: str = "") -> str:
    return (
        f"id: {rule_id}\ntitle: {rule_id}\nseverity: critical\nmode: auto\npriority: {priority}\n"
        f"evidence:\n  - {{id: status, collect: unit_status}}\nwhen: {when}\n{extra}"
    )


GHOST = rule("ghost", "{fact: status.exec_main_status, op: eq, value: 127}", 50)
UNKNOWN = rule("unknown", "{fact: unit.name, op: exists, value: true}", -100)
KILLED_SEEN = rule("killed", "{fact: status.exec_main_status, op: eq, value: 9}", 90)


def status(answer: Answer) -> Answer:
    """The same state as `unit_status` reads it (`systemctl show -p STATUS_PROPERTIES`)."""
    base = {
        key: value
        for key, _, value in (
            line.partition("=") for line in data("systemctl-show-ghost-127.txt").splitlines()
        )
    }
    shown = {key: value for key, _, value in (x.partition("=") for x in answer.stdout.split())}
    merged = {**base, **{k: v for k, v in shown.items() if k in base}}
    merged["ExecStart"] = base["ExecStart"].replace(
        "/usr/bin/docker exec vllm_ds4 bash /workspace/vllm-head.sh", "/bin/bash /opt/missing.sh"
    )
    return Answer(stdout="".join(f"{k}={v}\n" for k, v in merged.items()))


@dataclass(kw_only=True)
class UnitOnAClock(ScriptedExecutor):
    """The unit as systemd shows it at the fake clock's time: SIGKILLed and resting until 3.5 s,
    then its next start has exited 127 (whoever asks: the wait, or `unit_status`)."""

    time: FakeTime

    def answer(self, argv: tuple[str, ...]) -> Answer:
        now = KILLED_RESTING if self.time.at - 1000.0 < 3.5 else EXITED_127
        answers: dict[tuple[str, ...], Answer] = {SHOW_ARGV: now, STATUS_ARGV: status(now)}
        return answers.get(argv, super().answer(argv))


async def run_diagnosis(
    tmp_path: Path,
    http: HttpClient,
    rules: Mapping[str, str],
    *,
    settle_first: bool,
    trigger: ProbeResult | None = None,
    exits_at: float | None = None,
) -> tuple[DiagnosisResult, ScriptedExecutor]:
    """The diagnosis of qwen, its unit on a clock: killed and restarting (`UnitOnAClock`), or
    with `exits_at` a server whose engine died (`ServerOnAClock`)."""
    for name, text in rules.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    playbook = load_playbook(tmp_path)
    assert playbook.problems == ()
    time = FakeTime()
    executor: ScriptedExecutor = (
        UnitOnAClock(answers={}, time=time)
        if exits_at is None
        else ServerOnAClock(answers={}, time=time, exits_at=exits_at)
    )
    cfg = config()
    diagnosis = await diagnose(
        cfg.endpoints["qwen"],
        config=cfg,
        state="down",
        trigger=trigger,
        playbook=playbook,
        executor=executor,
        http=http,
        timeout=timedelta(seconds=5),
        settle=settle_first,
        clock=time,
        pause=time.pause,
    )
    return diagnosis, executor


async def test_the_diagnosis_reads_the_attempt_after_the_restart(
    tmp_path: Path, http: HttpClient
) -> None:
    diagnosis, _ = await run_diagnosis(
        tmp_path, http, {"ghost": GHOST, "unknown": UNKNOWN}, settle_first=True
    )
    assert diagnosis.lines()[:2] == [
        "qwen (down): ghost matched on vllm-qwen.service@spark1",
        "waited 3.5s (of up to 36.0s) for the restart of vllm-qwen.service@spark1: failed "
        "again: status=127, activating/auto-restart, 1 restart "
        "(before: signal 9, activating/auto-restart, 0 restarts)",
    ]
    # without settling the same evidence said signal 9, and the catch-all matched first
    (tmp_path / "x").mkdir()
    before, _ = await run_diagnosis(
        tmp_path / "x", http, {"ghost": GHOST, "unknown": UNKNOWN}, settle_first=False
    )
    assert before.lines()[0] == "qwen (down): unknown matched on vllm-qwen.service@spark1"


async def test_a_rule_that_needs_no_settling_is_tried_before_the_wait(
    tmp_path: Path, http: HttpClient
) -> None:
    """`settle: false` on a rule tried first: it reads the death as it is, and matching it ends
    the diagnosis without waiting for systemd."""
    rules = {
        "killed": KILLED_SEEN + "settle: false\n",
        "ghost": GHOST,
        "unknown": UNKNOWN,
    }
    diagnosis, executor = await run_diagnosis(tmp_path, http, rules, settle_first=True)
    assert diagnosis.lines()[0] == "qwen (down): killed matched on vllm-qwen.service@spark1"
    assert diagnosis.restarts == ()
    assert all(call.argv != SHOW_ARGV for call in executor.calls)
    # the same rule that settles: it reads the latest attempt and no longer matches
    (tmp_path / "x").mkdir()
    rules["killed"] = KILLED_SEEN
    diagnosis, _ = await run_diagnosis(tmp_path / "x", http, rules, settle_first=True)
    assert diagnosis.lines()[0] == "qwen (down): ghost matched on vllm-qwen.service@spark1"


@pytest.mark.parametrize(("value", "said"), [("yes please", "'yes please'"), ("1", "1")])
def test_settle_is_validated_when_the_rule_loads(tmp_path: Path, value: str, said: str) -> None:
    (tmp_path / "ghost.yaml").write_text(GHOST + f"settle: {value}\n")
    assert load_playbook(tmp_path).lines() == [
        f"{tmp_path}/ghost.yaml:9: rule 'ghost': settle: expected true or false, got {said}"
    ]


# --- collectors that do not apply to the scope: not run, not recorded, still explained ---------


async def test_collectors_that_do_not_apply_are_not_run_nor_recorded(
    tmp_path: Path, http: HttpClient
) -> None:
    (tmp_path / "mac.yaml").write_text(
        "id: mac\ntitle: mac\nseverity: critical\nmode: manual\n"
        "evidence:\n"
        "  - {id: job, collect: launchd_job}\n"
        "  - {id: script, collect: path_exists, params: {path: /w/x.sh, in_container: true}}\n"
        "  - {id: status, collect: unit_status}\n"
        "when: {fact: job.loaded, op: eq, value: false}\n"
    )
    executor = ScriptedExecutor(answers={STATUS_ARGV: status(EXITED_127)})
    cfg = config()
    diagnosis = await diagnose(
        cfg.endpoints["qwen"],
        config=cfg,
        state="down",
        trigger=None,
        playbook=load_playbook(tmp_path),
        executor=executor,
        http=http,
        timeout=timedelta(seconds=5),
    )
    assert [run.collector for run in diagnosis.evidence] == ["unit_status"]
    assert [call.argv for call in executor.calls] == [STATUS_ARGV]
    errors = diagnosis.evaluations[0].scopes[0].evidence_errors
    assert dict(errors) == {
        "job": "launchd_job: spark1 is not a launchd host (systemd)",
        "script": "path_exists: no container in this scope",
    }
    assert diagnosis.lines()[3] == (
        "    job.loaded: missing (launchd_job: spark1 is not a launchd host (systemd)): "
        "eq false: no"
    )


# --- a server whose engine died: its exit is waited for first ----------------------------------

HEALTH_503 = ProbeResult(
    endpoint="qwen",
    tier=Tier.LIVENESS,
    check="health",
    outcome=ProbeOutcome.FAIL,
    reason="HTTP 503 from /health",
    at=datetime(2026, 3, 3, 7, 2, 11, tzinfo=UTC),
    latency_s=0.01,
    http_status=503,
)
CLEAN_EXIT = unit(active="inactive", sub="dead", code=EXITED, status=0)  # vLLM's exit 0
ENGINE_500 = (
    "HTTP 500: EngineCore encountered an issue. See stack trace (above) for the root cause."
)


@pytest.mark.parametrize(
    ("trigger", "died"),
    [
        (HEALTH_503, True),
        (replace(HEALTH_503, http_status=500, reason="HTTP 500 from /health"), False),
        (replace(HEALTH_503, check="completion", http_status=500, reason=ENGINE_500), True),
        (replace(HEALTH_503, check="completion", reason="HTTP 503"), False),  # queue full
        (replace(HEALTH_503, http_status=None, reason="connection refused"), False),
        (None, False),
    ],
)
def test_only_health_503_says_the_engine_died(trigger: ProbeResult | None, died: bool) -> None:
    assert engine_died(trigger) is died


async def exits(
    answers: Sequence[Answer], http: HttpClient
) -> tuple[tuple[Restart, ...], FakeTime]:
    time = FakeTime()
    executor = ScriptedExecutor(answers={}, sequences={SHOW_ARGV: list(answers)})
    scope = Scope(endpoint=QWEN, host=SPARK1, unit=QWEN_UNIT)
    return await wait_for_exit([context(executor, time, scope, http)]), time


@pytest.mark.parametrize(
    ("answers", "outcome", "after", "waited"),
    [
        # vLLM's API server exits 0 a second or two after its engine died
        ([HEALTHY, HEALTHY, HEALTHY, CLEAN_EXIT], RestartOutcome.EXITED,
         "status=0, inactive/dead, 0 restarts", 1.5),
        # with Restart=always systemd is already bringing it back: a new main process
        ([HEALTHY, replace(HEALTHY, stdout=HEALTHY.stdout.replace("MainPID=4000", "MainPID=5000"))],
         RestartOutcome.EXITED, "no exit yet, active/running, 0 restarts", 0.5),
        ([HEALTHY, unit(active="deactivating", sub="stop-sigterm", code=0, status=0, pid=4000)],
         RestartOutcome.EXITED, "no exit yet, deactivating/stop-sigterm, 0 restarts", 0.5),
        # VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1: it stays up, and is diagnosed as it is
        ([HEALTHY], RestartOutcome.STILL_RUNNING, "no exit yet, active/running, 0 restarts", 5.5),
        ([HEALTHY, Answer(status=1, stderr="Failed to connect to bus\n")],
         RestartOutcome.UNREADABLE, "no exit yet, active/running, 0 restarts", 0.5),
    ],
)  # fmt: skip
async def test_a_server_whose_engine_died_is_watched_until_it_exits(
    http: HttpClient,
    answers: list[Answer],
    outcome: RestartOutcome,
    after: str,
    waited: float,
) -> None:
    found, time = await exits(answers, http)
    assert [(r.outcome, r.after, r.waited_s, r.bound_s, r.waited_for) for r in found] == [
        (outcome, after, waited, 5.5, "exit")
    ]
    assert time.pauses == [0.5] * int(waited / 0.5)


@pytest.mark.parametrize(
    "answer",
    [
        CLEAN_EXIT,  # it has exited already: the diagnosis reads that now
        KILLED_RESTING,  # systemd is about to restart it: the restart wait's business
        unit(active="activating", sub="start", code=0, status=0),  # still starting
        Answer(status=1, stderr="Failed to connect to bus\n"),
    ],
)
async def test_a_unit_not_serving_is_not_waited_for_to_exit(
    http: HttpClient, answer: Answer
) -> None:
    found, time = await exits([answer], http)
    assert (found, time.pauses) == ((), [])


async def test_the_first_unit_of_a_pair_to_exit_ends_the_wait_for_both(
    http: HttpClient,
) -> None:
    """ds4's head exits after its engine died; its worker on the other box stays up."""
    spark2 = Host(name="spark2", address="192.168.1.12")
    worker = UnitRef(host="spark2", unit="vllm-ds4-worker.service")
    head = UnitRef(host="spark1", unit="vllm-ds4-head.service")
    ds4 = Endpoint(
        name="ds4", kind="openai", url="http://192.168.1.11:8000", model="d", units=(worker, head)
    )
    show = ("systemctl", "show", "{}", "-p", ",".join(SHOW), "--no-pager")
    worker_argv = tuple(word.format(worker.unit) for word in show)
    head_argv = tuple(word.format(head.unit) for word in show)
    time = FakeTime()
    executor = ScriptedExecutor(
        answers={worker_argv: HEALTHY},
        sequences={head_argv: [HEALTHY, HEALTHY, CLEAN_EXIT]},
    )
    contexts = [
        context(executor, time, Scope(endpoint=ds4, host=spark2, unit=worker), http),
        context(executor, time, Scope(endpoint=ds4, host=SPARK1, unit=head, index=1), http),
    ]
    found = await wait_for_exit(contexts)
    assert [r.line() for r in found] == [
        "waited 1.0s (of up to 5.5s) for the exit of vllm-ds4-worker.service@spark2: "
        "still running: no exit yet, active/running, 0 restarts "
        "(before: no exit yet, active/running, 0 restarts)",
        "waited 1.0s (of up to 5.5s) for the exit of vllm-ds4-head.service@spark1: exited: "
        "status=0, inactive/dead, 0 restarts (before: no exit yet, active/running, 0 restarts)",
    ]


ENGINE_DEATH = rule(
    "engine-death",
    "{all: [{fact: status.active_state, op: eq, value: inactive},"
    " {fact: status.result, op: eq, value: success}]}",
    50,
)


@dataclass(kw_only=True)
class ServerOnAClock(ScriptedExecutor):
    """The unit as systemd shows it at the fake clock's time: serving until `exits_at` seconds
    (its engine is dead), then inactive with `Result=success` (whoever asks)."""

    time: FakeTime
    exits_at: float

    def answer(self, argv: tuple[str, ...]) -> Answer:
        now = HEALTHY if self.time.at - 1000.0 < self.exits_at else CLEAN_EXIT
        answers: dict[tuple[str, ...], Answer] = {SHOW_ARGV: now, STATUS_ARGV: status(now)}
        return answers.get(argv, super().answer(argv))


@pytest.mark.parametrize(
    ("trigger", "exits_at", "lines"),
    [
        # the host: diagnosed 0.2 s after the 503, the server exits 1.2 s later
        (HEALTH_503, 1.2, [
            "qwen (down): engine-death matched on vllm-qwen.service@spark1",
            "waited 1.5s (of up to 5.5s) for the exit of vllm-qwen.service@spark1: exited: "
            "status=0, inactive/dead, 0 restarts "
            "(before: no exit yet, active/running, 0 restarts)",
        ]),
        # kept alive on engine death: it stays up, and nothing explains it
        (HEALTH_503, 60.0, [
            "qwen (down): unknown matched on vllm-qwen.service@spark1",
            "waited 5.5s (of up to 5.5s) for the exit of vllm-qwen.service@spark1: still "
            "running: no exit yet, active/running, 0 restarts "
            "(before: no exit yet, active/running, 0 restarts)",
        ]),
        # a refused connection says nothing of the engine: nothing to wait for
        (replace(HEALTH_503, http_status=None, reason="connection refused"), 1.2, [
            "qwen (down): unknown matched on vllm-qwen.service@spark1",
        ]),
    ],
)  # fmt: skip
async def test_the_diagnosis_reads_the_server_after_it_exited(
    tmp_path: Path,
    http: HttpClient,
    trigger: ProbeResult,
    exits_at: float,
    lines: list[str],
) -> None:
    rules = {"engine-death": ENGINE_DEATH, "unknown": UNKNOWN}
    diagnosis, _ = await run_diagnosis(
        tmp_path, http, rules, settle_first=True, trigger=trigger, exits_at=exits_at
    )
    assert [line for line in diagnosis.lines() if not line.startswith(" ")][: len(lines)] == lines
    assert len(diagnosis.restarts) == len(lines) - 1
