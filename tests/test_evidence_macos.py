"""The launchd and macOS collectors on recorded macOS outputs (tests/data/evidence/macos/): the
parsers table-driven, the collectors through a scripted executor that answers each command with
what a Mac printed. No Mac runs here; see that folder's README for where the shapes come from."""

from __future__ import annotations

import plistlib
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.httpclient import HttpClient
from supervisor.playbook.evidence.base import CollectContext, CollectedEvidence, FactValue, Scope
from supervisor.playbook.evidence.launchctl import (
    NOT_LOADED_FACTS,
    job_facts,
    log_paths,
    parse_print,
)
from supervisor.playbook.evidence.macos import (
    parse_lsof,
    parse_memory_pressure,
    parse_pressure_level,
    parse_vm_stat,
)
from supervisor.playbook.evidence.registry import COLLECTORS
from tests.test_evidence import Answer, ScriptedExecutor

DATA = Path(__file__).parent / "data" / "evidence" / "macos"
M3ULTRA = Host(name="m3ultra", address="192.168.1.10", service_manager="launchd")
KIMI_JOB = UnitRef(
    host="m3ultra",
    unit="com.fleet.mlx-kimi",
    domain="gui/501",
    plist="~/Library/LaunchAgents/com.fleet.mlx-kimi.plist",
)
KIMI = Endpoint(
    name="kimi", kind="openai", url="http://192.168.1.10:8013", model="kimi", units=(KIMI_JOB,)
)
SCOPE = Scope(endpoint=KIMI, host=M3ULTRA, unit=KIMI_JOB)
PRINT = ("launchctl", "print", "gui/501/com.fleet.mlx-kimi")
OUT_LOG = "/Users/milo/Library/Logs/mlx-kimi.out.log"
ERR_LOG = "/Users/milo/Library/Logs/mlx-kimi.err.log"
LSOF = ("lsof", "-nP", "-iTCP:8013", "-sTCP:LISTEN")
LAST_OK = datetime(2026, 11, 24, 21, 0, 30, tzinfo=UTC)
SINCE_EPOCH = int((LAST_OK - timedelta(seconds=30)).timestamp())


def data(name: str) -> str:
    return (DATA / name).read_text()


def printed(name: str) -> Answer:
    return Answer(stdout=data(name))


NOT_FOUND = Answer(status=113, stderr=data("launchctl-print-not-found.stderr"))


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    async with HttpClient() as client:
        yield client


async def collect(
    http: HttpClient,
    name: str,
    answers: Mapping[tuple[str, ...], Answer],
    params: Mapping[str, object] | None = None,
    *,
    scope: Scope = SCOPE,
    last_ok_at: datetime | None = None,
) -> tuple[CollectedEvidence, ScriptedExecutor]:
    executor = ScriptedExecutor(answers=answers)
    chosen = COLLECTORS[name]
    ctx = CollectContext(
        scope=scope,
        executor=executor,
        timeout=timedelta(seconds=5),
        http=http,
        last_ok_at=last_ok_at,
    )
    evidence = await chosen.run(ctx, chosen.params.model_validate(params or {}))
    return evidence, executor


# --- launchctl print -----------------------------------------------------------------------------

KIMI_ARGS = (
    "/Users/milo/mlx/.venv/bin/python -m mlx_lm.server --model /Users/milo/models/Kimi-K2.6-DQ3"
)
JOBS: list[tuple[str, dict[str, FactValue]]] = [
    ("launchctl-print-running.txt",
     {"loaded": True, "state": "running", "running": True, "spawning": False, "pid": 48213,
      "runs": 3,
      "last_exit_code": 0, "never_exited": False, "last_signal": "", "last_exit": "exit 0",
      "program": "/Users/milo/mlx/.venv/bin/python",
      "arguments": f"{KIMI_ARGS} --host 0.0.0.0 --port 8013",
      "stdout_path": OUT_LOG, "stderr_path": ERR_LOG,
      "plist_path": "/Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist"}),
    ("launchctl-print-never-ran.txt",
     {"loaded": True, "state": "not running", "running": False, "spawning": False, "pid": 0,
      "runs": 0,
      "never_exited": True, "last_signal": "", "last_exit": "never exited",
      "program": "/Users/milo/mlx/.venv/bin/mlx-embeddings-server",
      "arguments": "/Users/milo/mlx/.venv/bin/mlx-embeddings-server --model Qwen3-Embedding-8B "
      "--port 8002",
      "stdout_path": "/Users/milo/Library/Logs/mlx-embed.out.log",
      "stderr_path": "/Users/milo/Library/Logs/mlx-embed.err.log",
      "plist_path": "/Users/milo/Library/LaunchAgents/com.fleet.mlx-embed.plist"}),
    ("launchctl-print-signal.txt",
     {"loaded": True, "state": "spawn scheduled", "running": False, "spawning": False, "pid": 0,
      "runs": 14,
      "never_exited": False, "last_signal": "Killed: 9", "last_signal_number": 9,
      "last_exit": "signal Killed: 9",
      "program": "/Users/milo/mlx/.venv/bin/python",
      "arguments": f"{KIMI_ARGS} --port 8013",
      "stdout_path": OUT_LOG, "stderr_path": ERR_LOG,
      "plist_path": "/Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist"}),
    ("launchctl-print-exit-1.txt",
     {"loaded": True, "state": "not running", "running": False, "spawning": False, "pid": 0,
      "runs": 1,
      "last_exit_code": 1, "never_exited": False, "last_signal": "", "last_exit": "exit 1",
      "program": "/opt/mlx/bin/python",
      "arguments": "/opt/mlx/bin/python /opt/mlx/rerank_server.py --port 8003",
      "stdout_path": "", "stderr_path": "/var/log/mlx-rerank.log",
      "plist_path": "/Library/LaunchDaemons/com.fleet.mlx-rerank.plist"}),
    # kickstarted this moment: launchd spawns it (a pid, `xpcproxy`): running, not dead
    ("launchctl-print-xpcproxy.txt",
     {"loaded": True, "state": "xpcproxy", "running": True, "spawning": True, "pid": 51877,
      "runs": 4, "never_exited": False, "last_signal": "Terminated: 15",
      "last_signal_number": 15, "last_exit": "signal Terminated: 15",
      "program": "/Users/milo/mlx/.venv/bin/python",
      "arguments": f"{KIMI_ARGS} --host 0.0.0.0 --port 8013",
      "stdout_path": OUT_LOG, "stderr_path": ERR_LOG,
      "plist_path": "/Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist"}),
    # running; the previous run's signal is no exit code of this one
    ("launchctl-print-running-after-term.txt",
     {"loaded": True, "state": "running", "running": True, "spawning": False, "pid": 16090,
      "runs": 2, "never_exited": False, "last_signal": "Terminated: 15",
      "last_signal_number": 15, "last_exit": "signal Terminated: 15",
      "program": "/Users/milo/mlx/.venv/bin/python",
      "arguments": f"{KIMI_ARGS} --host 0.0.0.0 --port 8013",
      "stdout_path": OUT_LOG, "stderr_path": ERR_LOG,
      "plist_path": "/Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist"}),
]  # fmt: skip


@pytest.mark.parametrize(("capture", "expected"), JOBS)
def test_launchctl_print_of_recorded_jobs(capture: str, expected: dict[str, FactValue]) -> None:
    facts = job_facts(parse_print(data(capture)))
    assert facts == expected
    assert set(facts) <= set(COLLECTORS["launchd_job"].facts)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\tlast exit code = 78: EX_CONFIG\n", {"last_exit_code": 78, "never_exited": False}),
        ("\tlast exit code = -9\n", {"last_exit_code": -9, "never_exited": False}),
        (  # a signal outranks the (never exited) line printed beside it
            "\tlast exit code = (never exited)\n\tlast terminating signal = Killed: 9\n",
            {"never_exited": False, "last_signal": "Killed: 9", "last_signal_number": 9},
        ),
        ("\tlast terminating signal = Abort trap\n", {"never_exited": False}),
    ],
)
def test_last_exit_shapes(text: str, expected: dict[str, FactValue]) -> None:
    facts = job_facts(parse_print(f"gui/501/x = {{\n{text}}}\n"))
    assert {key: facts[key] for key in expected} == expected
    if "last_signal_number" not in expected:
        assert "last_signal_number" not in facts


def test_nested_blocks_do_not_shadow_the_jobs_own_keys() -> None:
    job = parse_print(data("launchctl-print-running.txt"))
    assert (job.keys["state"], job.keys["domain"], job.pid) == (
        "running",
        "gui/501 [100003]",
        48213,
    )
    assert ("ID" in job.keys, "PYTHONUNBUFFERED" in str(job.keys)) == (False, False)
    assert log_paths(job) == (OUT_LOG, ERR_LOG)


PLUTIL = (
    "plutil", "-convert", "xml1", "-o", "-",
    "/Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist",
)  # fmt: skip


async def test_launchd_job_reads_the_job_and_its_plist_without_root(
    http: HttpClient,
) -> None:
    evidence, executor = await collect(
        http,
        "launchd_job",
        {
            PRINT: printed("launchctl-print-running.txt"),
            PLUTIL: printed("com.fleet.mlx-kimi.plist"),
        },
    )
    assert (evidence.error, evidence.facts["pid"], evidence.facts["running"]) == ("", 48213, True)
    assert evidence.facts["keep_alive"] is True
    assert [(call.argv, call.sudo) for call in executor.calls] == [(PRINT, False), (PLUTIL, False)]


@pytest.mark.parametrize(
    ("plist", "keep_alive"),
    [
        (printed("com.fleet.mlx-kimi.plist"), True),
        (printed("com.fleet.mlx-embed-watchpaths.plist"), False),  # WatchPaths, no KeepAlive
        (Answer(stdout=plistlib.dumps({"KeepAlive": {"SuccessfulExit": False}}).decode()), True),
        (Answer(stdout=plistlib.dumps({"KeepAlive": False}).decode()), False),
        (Answer(status=1, stderr="file does not exist or is not readable\n"), None),
        (Answer(stdout="not a plist"), None),
    ],
)
async def test_keep_alive_is_read_from_the_plist_launchd_loaded(
    http: HttpClient, plist: Answer, keep_alive: bool | None
) -> None:
    """A job in `spawn scheduled` is a crash loop only when launchd keeps it alive: a job
    without KeepAlive (a WatchPaths one) shows the same state and is no loop."""
    evidence, _ = await collect(
        http, "launchd_job", {PRINT: printed("launchctl-print-signal.txt"), PLUTIL: plist}
    )
    assert evidence.error == ""
    assert evidence.facts.get("keep_alive") == keep_alive
    assert "keep_alive" in evidence.facts or keep_alive is None
    assert [c.command for c in evidence.commands][-1] == " ".join(PLUTIL)


async def test_a_job_launchd_does_not_know_is_a_fact(http: HttpClient) -> None:
    evidence, _ = await collect(http, "launchd_job", {PRINT: NOT_FOUND})
    assert (evidence.error, dict(evidence.facts)) == ("", NOT_LOADED_FACTS)


@pytest.mark.parametrize(
    ("name", "answers", "scope", "error"),
    [
        ("launchd_job", {PRINT: Answer(status=1, stderr="Operation not permitted\n")}, SCOPE,
         "launchctl print failed: exit 1: Operation not permitted"),
        ("launchd_job", {PRINT: Answer(status=None, error="timed out after 5s")}, SCOPE,
         "launchctl print failed: timed out after 5s"),
        ("launchd_log", {PRINT: Answer(status=5, stderr="Input/output error\n")}, SCOPE,
         "launchctl print failed: exit 5: Input/output error"),
        ("launchd_job", {},
         Scope(endpoint=KIMI, host=M3ULTRA, unit=UnitRef(host="m3ultra", unit="ollama.service")),
         "ollama.service is not a launchd job (its unit has no domain)"),
        ("mac_listeners", {LSOF: Answer(status=1, stderr="lsof: unacceptable port\n")}, SCOPE,
         "lsof failed: exit 1: lsof: unacceptable port"),
        ("mac_memory", {("memory_pressure", "-Q"): Answer(status=127, stderr="not found\n")},
         SCOPE, "memory_pressure failed: exit 127: not found"),
    ],
)  # fmt: skip
async def test_a_failed_command_is_a_plain_error(
    http: HttpClient,
    name: str,
    answers: Mapping[tuple[str, ...], Answer],
    scope: Scope,
    error: str,
) -> None:
    evidence, _ = await collect(http, name, answers, scope=scope)
    assert (evidence.error, dict(evidence.facts), evidence.collector) == (error, {}, name)


# --- the job's logs ------------------------------------------------------------------------------


def stat(path: str) -> tuple[str, ...]:
    return ("stat", "-f", "%m", "--", path)


def tail(path: str, lines: int = 200) -> tuple[str, ...]:
    return ("tail", "-n", str(lines), "--", path)


async def test_launchd_log_reads_only_the_logs_written_since_the_last_passing_check(
    http: HttpClient,
) -> None:
    answers = {
        PRINT: printed("launchctl-print-running.txt"),
        stat(OUT_LOG): Answer(stdout=f"{SINCE_EPOCH - 1}\n"),  # untouched since it passed
        stat(ERR_LOG): Answer(stdout=f"{SINCE_EPOCH + 600}\n"),
        tail(ERR_LOG): Answer(stdout=data("mlx-kimi-metal-oom.err.log")),
    }
    evidence, executor = await collect(http, "launchd_log", answers, last_ok_at=LAST_OK)
    assert evidence.error == ""
    assert dict(evidence.facts) == {
        "text": data("mlx-kimi-metal-oom.err.log").rstrip("\n"),
        "lines": 3,
        "last_lines": "2026-11-24 21:14:02,118 - INFO - Starting httpd at 0.0.0.0 on port "
        "8013... | "
        '127.0.0.1 - - [24/Nov/2026 21:20:11] "POST /v1/chat/completions HTTP/1.1" '
        "200 - | libc++abi: terminating due to uncaught exception of type std::runtime_error: "
        "[METAL] Command buffer execution failed: Insufficient Memory "
        "(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
        "paths": (OUT_LOG, ERR_LOG),
        "read": (ERR_LOG,),
        "since": "2026-11-24T21:00:00Z",
    }
    assert [call.argv for call in executor.calls] == [
        PRINT, stat(OUT_LOG), stat(ERR_LOG), tail(ERR_LOG)
    ]  # fmt: skip
    assert not any(call.sudo for call in executor.calls)


async def test_launchd_log_without_a_passing_check_reads_every_log_and_skips_missing_ones(
    http: HttpClient,
) -> None:
    missing = Answer(status=1, stderr=f"stat: {OUT_LOG}: stat: No such file or directory\n")
    answers = {
        PRINT: printed("launchctl-print-running.txt"),
        stat(OUT_LOG): missing,
        stat(ERR_LOG): Answer(stdout="1732482000\n"),
        tail(ERR_LOG, 50): Answer(stdout=data("mlx-kimi-port-taken.err.log")),
    }
    evidence, executor = await collect(http, "launchd_log", answers, {"lines": 50, "as_root": True})
    assert (evidence.error, evidence.facts["paths"], evidence.facts["lines"]) == ("", (ERR_LOG,), 6)
    assert str(evidence.facts["text"]).endswith("OSError: [Errno 48] Address already in use")
    assert evidence.facts["since"] == ""
    assert all(call.sudo for call in executor.calls[1:])


async def test_launchd_log_of_a_job_launchd_does_not_know_reads_nothing_more(
    http: HttpClient,
) -> None:
    evidence, executor = await collect(http, "launchd_log", {PRINT: NOT_FOUND})
    assert (evidence.error, evidence.facts["text"], evidence.facts["paths"]) == ("", "", ())
    assert len(executor.calls) == 1


async def test_launchd_log_stat_that_cannot_read_is_an_error(http: HttpClient) -> None:
    answers = {
        PRINT: printed("launchctl-print-running.txt"),
        stat(OUT_LOG): Answer(status=1, stderr=f"stat: {OUT_LOG}: Permission denied\n"),
    }
    evidence, _ = await collect(http, "launchd_log", answers)
    assert evidence.error == f"stat failed: exit 1: stat: {OUT_LOG}: Permission denied"


# --- listeners -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "expected"),
    [
        ("lsof-listen-8013.txt", [(48213, "Python", "milo"), (48213, "Python", "milo")]),
        ("lsof-listen-8013-others.txt", [(51877, "python3.1", "milo"), (60112, "ssh", "jordan")]),
    ],
)
def test_lsof_sockets(capture: str, expected: list[tuple[int, str, str]]) -> None:
    assert parse_lsof(data(capture)) == expected


def test_lsof_command_with_an_escaped_space() -> None:
    line = "Google\\x20 123 milo 5u IPv4 0x1 0t0 TCP *:8013 (LISTEN)\n"
    assert parse_lsof(line) == [(123, "Google ", "milo")]


KIMI_CMD = f"{KIMI_ARGS} --host 0.0.0.0 --port 8013"
PS_KIMI = ("ps", "-ww", "-o", "pid=,args=", "-p", "48213")


async def test_mac_listeners_the_job_holds_its_port(http: HttpClient) -> None:
    answers = {
        LSOF: Answer(stdout=data("lsof-listen-8013.txt")),
        PRINT: printed("launchctl-print-running.txt"),
        PS_KIMI: Answer(stdout=f"48213 {KIMI_CMD}\n"),
    }
    evidence, executor = await collect(http, "mac_listeners", answers)
    assert (evidence.error, dict(evidence.facts)) == (
        "",
        {
            "count": 2,
            "pids": (48213,),
            "commands": (KIMI_CMD,),
            "users": ("milo",),
            "job_pid": 48213,
            "held_by_job": True,
            "held_by_other": False,
        },
    )
    assert [(call.argv, call.sudo) for call in executor.calls] == [
        (LSOF, False), (PRINT, False), (PS_KIMI, False)
    ]  # fmt: skip


async def test_mac_listeners_another_process_holds_the_port_of_a_dead_job(
    http: HttpClient,
) -> None:
    ps = ("ps", "-ww", "-o", "pid=,args=", "-p", "51877,60112")
    answers = {
        ("lsof", "-nP", "-iTCP:8013", "-sTCP:LISTEN"): Answer(
            stdout=data("lsof-listen-8013-others.txt")
        ),
        PRINT: printed("launchctl-print-signal.txt"),
        ps: Answer(stdout="51877 python3 -m http.server 8013\n"),  # 60112 ended meanwhile
    }
    evidence, executor = await collect(http, "mac_listeners", answers, {"as_root": True})
    assert dict(evidence.facts) == {
        "count": 2,
        "pids": (51877, 60112),
        "commands": ("python3 -m http.server 8013", "ssh"),
        "users": ("milo", "jordan"),
        "job_pid": 0,
        "held_by_job": False,
        "held_by_other": True,
    }
    assert [call.sudo for call in executor.calls] == [True, False, False]


async def test_mac_listeners_on_a_free_port_of_an_endpoint_without_units(
    http: HttpClient,
) -> None:
    endpoint = Endpoint(name="e", kind="health", url="http://192.168.1.18:8003/health")
    scope = Scope(endpoint=endpoint, host=M3ULTRA, unit=None)
    lsof = ("lsof", "-nP", "-iTCP:8003", "-sTCP:LISTEN")
    evidence, executor = await collect(http, "mac_listeners", {lsof: Answer(status=1)}, scope=scope)
    assert (evidence.error, dict(evidence.facts)) == (
        "",
        {"count": 0, "pids": (), "commands": (), "users": ()},
    )
    assert len(executor.calls) == 1


# --- memory --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "expected"),
    [
        ("vm-stat-m3ultra.txt",
         {"page_size": 16384, "free_gib": 0.8, "active_gib": 13.9, "inactive_gib": 13.7,
          "wired_gib": 445.0, "compressed_gib": 11.2}),
        ("vm-stat-intel-4k.txt",
         {"page_size": 4096, "free_gib": 1.0, "active_gib": 2.0, "inactive_gib": 0.5,
          "wired_gib": 3.0, "compressed_gib": 0.0}),
        ("lsof-listen-8013.txt", {}),  # no page-size header: nothing can be converted
    ],
)  # fmt: skip
def test_vm_stat_in_gib_with_the_stated_page_size(
    capture: str, expected: dict[str, FactValue]
) -> None:
    assert parse_vm_stat(data(capture)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (data("memory-pressure-Q-m3ultra.txt"), {"free_percent": 9, "total_gib": 512.0}),
        ("The system has 17179869184 bytes of physical memory.\n"
         "System-wide memory free percentage: 40%\n", {"free_percent": 40, "total_gib": 16.0}),
        ("memory_pressure: unavailable\n", {}),
    ],
)  # fmt: skip
def test_memory_pressure(text: str, expected: dict[str, FactValue]) -> None:
    assert parse_memory_pressure(text) == expected


@pytest.mark.parametrize(
    ("text", "level"), [("1\n", "normal"), ("2\n", "warn"), ("4\n", "critical"), ("", "unknown")]
)
def test_pressure_level(text: str, level: str) -> None:
    assert parse_pressure_level(text) == level


LEVEL = ("sysctl", "-n", "kern.memorystatus_vm_pressure_level")


async def test_mac_memory_puts_the_three_answers_together(http: HttpClient) -> None:
    answers = {
        ("memory_pressure", "-Q"): Answer(stdout=data("memory-pressure-Q-m3ultra.txt")),
        LEVEL: Answer(stdout="4\n"),
        ("vm_stat",): Answer(stdout=data("vm-stat-m3ultra.txt")),
    }
    evidence, executor = await collect(http, "mac_memory", answers)
    assert (evidence.error, dict(evidence.facts)) == (
        "",
        {
            "free_percent": 9,
            "total_gib": 512.0,
            "pressure_level": "critical",
            "page_size": 16384,
            "free_gib": 0.8,
            "active_gib": 13.9,
            "inactive_gib": 13.7,
            "wired_gib": 445.0,
            "compressed_gib": 11.2,
        },
    )
    assert set(evidence.facts) == set(COLLECTORS["mac_memory"].facts)
    assert not any(call.sudo for call in executor.calls)


async def test_mac_memory_with_a_vm_stat_that_states_no_page_size(http: HttpClient) -> None:
    answers = {
        ("memory_pressure", "-Q"): Answer(stdout=data("memory-pressure-Q-m3ultra.txt")),
        LEVEL: Answer(stdout="1\n"),
        ("vm_stat",): Answer(stdout="Pages free: 12.\n"),
    }
    evidence, _ = await collect(http, "mac_memory", answers)
    assert evidence.error == "vm_stat printed no page size"


# --- parsers never raise -------------------------------------------------------------------------

PARSERS: tuple[Callable[[str], object], ...] = (
    lambda text: job_facts(parse_print(text)),
    lambda text: log_paths(parse_print(text)),
    parse_lsof,
    parse_memory_pressure,
    parse_pressure_level,
    parse_vm_stat,
)


@settings(max_examples=200, database=None)
@given(st.text(alphabet=st.sampled_from('abc019 =:{}()"-.%\t\n\\x/') | st.characters()))
@example("0 ¹ 0")  # str.isdigit() holds for '¹'; int() refuses it (a CI run found it)
def test_parsers_never_raise(text: str) -> None:
    for parse in PARSERS:
        parse(text)
        parse(f"gui/501/x = {{\n\t{text}\n\targuments = {{\n\t\t{text}\n\t}}\n}}\n")


@pytest.mark.parametrize("name", ["mac_listeners", "mac_memory", "launchd_job", "launchd_log"])
async def test_mac_collectors_run_nothing_on_a_host_that_is_not_a_mac(
    http: HttpClient, name: str
) -> None:
    spark = Host(name="spark1", address="192.168.1.11")
    scope = Scope(endpoint=KIMI, host=spark, unit=UnitRef(host="spark1", unit="ollama.service"))
    evidence, executor = await collect(http, name, {}, scope=scope)
    not_a_mac = "spark1 is not a launchd host (systemd)"
    assert (evidence.error, executor.calls) == (not_a_mac, [])


async def test_launchd_log_with_a_run_marker_keeps_only_the_last_run(
    http: HttpClient,
) -> None:
    two_runs = (
        f"{data('mlx-kimi-metal-oom.err.log')}"
        "2026-11-25 06:01:10,442 - INFO - Starting httpd at 0.0.0.0 on port 8013...\n"
        '127.0.0.1 - - [25/Nov/2026 06:09:12] "GET /v1/models HTTP/1.1" 200 -\n'
    )
    answers = {
        PRINT: printed("launchctl-print-running.txt"),
        stat(OUT_LOG): Answer(stdout="1732482000\n"),
        tail(OUT_LOG): Answer(stdout=""),
        stat(ERR_LOG): Answer(stdout="1732482000\n"),
        tail(ERR_LOG): Answer(stdout=two_runs),
    }
    params = {"run_marker": "Starting httpd at"}
    evidence, _ = await collect(http, "launchd_log", answers, params)
    assert evidence.facts["text"] == "\n".join(two_runs.splitlines()[-2:])
    assert "kIOGPUCommandBufferCallbackErrorOutOfMemory" not in str(evidence.facts["text"])


def test_a_run_marker_must_be_a_regex() -> None:
    with pytest.raises(ValueError, match="not a valid regular expression"):
        COLLECTORS["launchd_log"].params.model_validate({"run_marker": "("})


@pytest.mark.parametrize(
    ("name", "params"),
    [("unit_status", {}), ("command_line", {}), ("journal", {}), ("listeners", {"port": 8013})],
)
async def test_linux_collectors_run_nothing_on_a_mac(
    http: HttpClient, name: str, params: Mapping[str, object]
) -> None:
    """No `systemctl` or `sudo -n journalctl` / `sudo -n ss` attempts on a Mac."""
    evidence, executor = await collect(http, name, {}, params)
    assert (evidence.error, executor.calls) == ("m3ultra is not a systemd host (launchd)", [])
