"""Evidence collectors: parsers on captured outputs, collectors on real commands of this machine
(through `LocalExecutor`) and, for systemd, on captured answers through a scripted executor."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shutil
import socket
import stat
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Protocol

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.execute.base import CommandResult, Executor, command_line
from supervisor.execute.containers import ContainerNameError, in_container
from supervisor.execute.local import LocalExecutor
from supervisor.judge.progress.load import MetricsFormatError
from supervisor.playbook.diagnose import diagnose
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    CollectorParams,
    FactValue,
    NoEvidenceParams,
    Scope,
)
from supervisor.playbook.evidence.declare import collector, found
from supervisor.playbook.evidence.execstart import parse_exec_start, split_argv, split_docker_exec
from supervisor.playbook.evidence.journal import journal_since, parse_journal, since_text
from supervisor.playbook.evidence.memory import parse_meminfo
from supervisor.playbook.evidence.metrics import parse_metrics
from supervisor.playbook.evidence.network import parse_pid_args, parse_ss
from supervisor.playbook.evidence.processes import parse_ps, select_processes
from supervisor.playbook.evidence.registry import COLLECTORS, collectors_of
from supervisor.playbook.evidence.settling import may_be_mid_attempt
from supervisor.playbook.evidence.systemd import parse_main_pid, parse_unit_status
from supervisor.playbook.loader import load_playbook
from tests.conftest import SimFactory
from tests.helpers import eventually
from tests.ports import free_port

DATA = Path(__file__).parent / "data" / "evidence"
SHIPPED = load_playbook(Path(__file__).resolve().parent.parent / "playbooks")
SPARK1 = Host(name="spark1", address="192.168.1.11")
FORGE = Host(name="forge", local=True)
HEAD = UnitRef(
    host="spark1",
    unit="vllm-ds4-head.service",
    container="vllm_ds4",
    known_good="/workspace/vllm-head.sh",
)
BARE_UNIT = UnitRef(host="forge", unit="ollama.service")
DS4 = Endpoint(
    name="ds4", kind="openai", url="http://192.168.1.11:8000", model="ds4", units=(HEAD,)
)
ASR = Endpoint(name="asr", kind="health", url="http://127.0.0.1:8765/health")
STATUS_PROPERTIES = (
    "LoadState,ActiveState,SubState,Result,ExecMainStatus,ExecMainCode,ExecMainPID,MainPID,"
    "NRestarts,ExecStart,DropInPaths,FragmentPath,User,ActiveEnterTimestampMonotonic"
)
UNIT_STATUS_ARGV = (
    "systemctl", "show", "vllm-ds4-head.service", "-p", STATUS_PROPERTIES, "--no-pager"
)  # fmt: skip
MAIN_PID_ARGV = ("systemctl", "show", "vllm-ds4-head.service", "-p", "MainPID", "--value")


def data(name: str) -> str:
    return (DATA / name).read_text()


# --- a scripted executor: captured answers for commands this machine cannot run (systemd) --------


@dataclass(frozen=True, kw_only=True)
class Answer:
    status: int | None = 0
    stdout: str = ""
    stderr: str = ""
    error: str = ""


@dataclass(frozen=True, kw_only=True)
class Call:
    host: str
    argv: tuple[str, ...]
    sudo: bool


@dataclass(kw_only=True)
class ScriptedExecutor:
    """Answers each argv from a table (unknown commands: exit 127) and records every call.
    An argv in `sequences` gets its answers in turn, the last one repeated."""

    answers: Mapping[tuple[str, ...], Answer]
    sequences: Mapping[tuple[str, ...], Sequence[Answer]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv in self.sequences:
            turns = self.sequences[argv]
            asked = sum(1 for call in self.calls if call.argv == argv)
            return turns[min(asked, len(turns)) - 1]
        return self.answers.get(argv, Answer(status=127, stderr="command not found"))

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        timeout: timedelta,
        sudo: bool = False,
        mutating: bool = False,
        stdin: str | None = None,
    ) -> CommandResult:
        assert not mutating, f"a collector ran a mutating command: {argv}"
        self.calls.append(Call(host=host.name, argv=tuple(argv), sudo=sudo))
        answer = self.answer(tuple(argv))
        return CommandResult(
            host=host.name,
            command=command_line(argv, sudo=sudo),
            exit_status=answer.status,
            stdout=answer.stdout,
            stderr=answer.stderr,
            duration_s=0.01,
            error=answer.error,
        )

    async def close(self) -> None:
        return None


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    async with HttpClient() as client:
        yield client


@dataclass(kw_only=True)
class FakeTime:
    """A clock that only moves when a collector pauses: pauses are recorded, never slept."""

    at: float = 1000.0
    pauses: list[float] = field(default_factory=list)

    def now(self) -> datetime:
        return datetime(2026, 3, 3, 7, 2, 11, tzinfo=UTC) + timedelta(seconds=self.at)

    def monotonic(self) -> float:
        return self.at

    async def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.at += seconds


class Collect(Protocol):
    async def __call__(
        self,
        name: str,
        params: Mapping[str, object] | None = None,
        *,
        scope: Scope,
        executor: Executor | None = None,
        timeout: timedelta = ...,
        last_ok_at: datetime | None = None,
        time: FakeTime | None = None,
    ) -> CollectedEvidence: ...


@pytest.fixture
def collect(http: HttpClient) -> Collect:
    """`await collect(name, params, scope=..., executor=...)` runs one registered collector
    (with `time`, its clock and its pauses are a `FakeTime`'s)."""

    async def run(
        name: str,
        params: Mapping[str, object] | None = None,
        *,
        scope: Scope,
        executor: Executor | None = None,
        timeout: timedelta = timedelta(seconds=5),
        last_ok_at: datetime | None = None,
        time: FakeTime | None = None,
    ) -> CollectedEvidence:
        chosen = COLLECTORS[name]
        ctx = CollectContext(
            scope=scope,
            executor=executor if executor is not None else LocalExecutor(),
            timeout=timeout,
            http=http,
            last_ok_at=last_ok_at,
        )
        if time is not None:
            ctx = replace(ctx, clock=time, pause=time.pause)
        return await chosen.run(ctx, chosen.params.model_validate(params or {}))

    return run


def head_scope() -> Scope:
    return Scope(endpoint=DS4, host=SPARK1, unit=HEAD)


def local_scope(unit: UnitRef | None = None) -> Scope:
    endpoint = Endpoint(name="local", kind="health", url="http://127.0.0.1:9/health", host="forge")
    return Scope(endpoint=endpoint, host=FORGE, unit=unit)


# --- systemctl show ------------------------------------------------------------------------------


def test_unit_status_of_a_healthy_unit_has_every_fact() -> None:
    assert parse_unit_status(data("systemctl-show-healthy.txt")) == {
        "load_state": "loaded",
        "active_state": "active",
        "sub_state": "running",
        "result": "success",
        "exec_main_status": 0,
        "exec_main_code": 0,
        "exec_main_pid": 48213,
        "main_pid": 48213,
        "n_restarts": 0,
        "exec_start": data("systemctl-show-healthy.txt").splitlines()[5].removeprefix("ExecStart="),
        "exec_start_argv": "/usr/bin/docker exec vllm_ds4 bash /workspace/vllm-head.sh",
        "exec_start_path": "/usr/bin/docker",
        "exec_start_script": "/workspace/vllm-head.sh",
        "exec_start_container": "vllm_ds4",
        "drop_in_paths": (),
        "fragment_path": "/etc/systemd/system/vllm-ds4-head.service",
        "user": "",
        "active_enter_monotonic_us": 93874512331,
    }


@pytest.mark.parametrize(
    ("capture", "expected", "absent"),
    [
        (
            "systemctl-show-ghost-127.txt",
            {
                "exec_main_status": 127,
                "exec_main_code": 1,
                "result": "exit-code",
                "active_state": "activating",
                "sub_state": "auto-restart",
                "n_restarts": 1043,
                "main_pid": 0,
                "exec_start_script": "/workspace/vllm-head.sh",
                "exec_start_container": "vllm_ds4",
            },
            (),
        ),
        (
            "systemctl-show-exec-203.txt",
            {
                "exec_main_status": 203,
                "result": "exit-code",
                "exec_start_path": "/opt/vllm/bin/vllm-serve",
                "exec_start_script": "/opt/vllm/bin/vllm-serve",
                "exec_start_container": "",
                "exec_start_argv": "/opt/vllm/bin/vllm-serve --config /etc/vllm/kimi.yaml",
                "user": "vllm",
            },
            (),
        ),
        (
            "systemctl-show-start-limit-hit.txt",
            {"result": "start-limit-hit", "active_state": "failed", "sub_state": "failed"},
            (),
        ),
        (
            "systemctl-show-not-found.txt",
            {
                "load_state": "not-found",
                "active_state": "inactive",
                "fragment_path": "",
                "exec_start": "",
                "exec_start_argv": "",
                "exec_start_path": "",
                "exec_start_script": "",
                "exec_start_container": "",
                "drop_in_paths": (),
            },
            (),
        ),
        (
            "systemctl-show-docker-flags.txt",
            {
                "exec_start_container": "vllm_ds4",
                "exec_start_script": "/workspace/vllm-worker.sh",
                "exec_start_path": "/usr/bin/docker",
                "user": "vllm",
                "drop_in_paths": (
                    "/etc/systemd/system/vllm-ds4-worker.service.d/10-env.conf",
                    "/etc/systemd/system/vllm-ds4-worker.service.d/50-fleet-supervisor-execstart.conf",
                ),
            },
            ("exec_main_status", "exec_main_code", "active_enter_monotonic_us"),
        ),
    ],
)
def test_unit_status_parses_captured_answers(
    capture: str, expected: Mapping[str, FactValue], absent: tuple[str, ...]
) -> None:
    facts = parse_unit_status(data(capture))
    assert {name: facts.get(name) for name in expected} == expected
    assert [name for name in absent if name in facts] == []
    assert set(facts) <= set(COLLECTORS["unit_status"].facts)


@pytest.mark.parametrize(
    ("argv", "container", "script"),
    [
        (
            "/usr/bin/docker exec vllm_ds4 bash /workspace/vllm-head.sh",
            "vllm_ds4",
            "/workspace/vllm-head.sh",
        ),
        ("docker exec -it vllm_ds4 sh -e /w/x.sh", "vllm_ds4", "/w/x.sh"),
        ("docker exec -uroot -e A=1 c1 /workspace/run.sh --port 8000", "c1", "/workspace/run.sh"),
        ("docker exec --user=vllm --workdir /w c2 bash -o pipefail /w/s.sh a", "c2", "/w/s.sh"),
        ("docker exec --env-file /e -d c3 bash -c 'exec /w/s.sh --x'", "c3", "/w/s.sh"),
        ("docker exec c3 bash -c 'cd /w && ./s.sh'", "c3", "bash"),
        ("docker exec -- c4 bash -- /w/s.sh", "c4", "/w/s.sh"),
        ("/usr/bin/env VLLM_X=1 bash /opt/x.sh", "", "/opt/x.sh"),
        ("/opt/vllm/bin/vllm-serve --config /etc/vllm/kimi.yaml", "", "/opt/vllm/bin/vllm-serve"),
        ("/bin/sh", "", "/bin/sh"),
        ("docker exec -it", "", "docker"),
        ("docker run --rm vllm/vllm-openai bash /x.sh", "", "docker"),
        ("docker exec c5 bash 'odd quote", "c5", "'odd"),
    ],
)
def test_exec_start_container_and_script(argv: str, container: str, script: str) -> None:
    value = f"{{ path=/usr/bin/docker ; argv[]={argv} ; ignore_errors=no ; pid=0 ; status=0/0 }}"
    parsed = parse_exec_start(value)
    assert (parsed.container, parsed.script, parsed.argv_text) == (container, script, argv)
    assert split_docker_exec(split_argv(argv))[0] == container


def test_exec_start_that_is_not_systemds_rendering_is_read_as_a_command_line() -> None:
    parsed = parse_exec_start("/usr/bin/docker exec vllm_ds4 bash /workspace/vllm-head.sh")
    assert (parsed.path, parsed.container, parsed.script) == (
        "/usr/bin/docker",
        "vllm_ds4",
        "/workspace/vllm-head.sh",
    )


@pytest.mark.parametrize(
    ("answer", "pid"),
    [("48213\n", 48213), ("0\n", 0), ("", None), ("[not set]", None), ("-1", None)],
)
def test_main_pid(answer: str, pid: int | None) -> None:
    assert parse_main_pid(answer) == pid


async def test_unit_status_runs_systemctl_show_without_root(collect: Collect) -> None:
    answer = Answer(stdout=data("systemctl-show-ghost-127.txt"))
    executor = ScriptedExecutor(answers={UNIT_STATUS_ARGV: answer})
    evidence = await collect("unit_status", scope=head_scope(), executor=executor)
    assert evidence.error == ""
    assert evidence.collector == "unit_status"
    assert evidence.facts["exec_main_status"] == 127
    assert executor.calls == [Call(host="spark1", argv=UNIT_STATUS_ARGV, sudo=False)]
    assert [result.command for result in evidence.commands] == [
        f"systemctl show vllm-ds4-head.service -p {STATUS_PROPERTIES} --no-pager"
    ]


# --- unit_status in a crash loop: a sample taken mid-attempt is taken again ---------------------


def show(
    *, active: str, sub: str, status: int, pid: int, restarts: int, entered: int = 0
) -> Answer:
    """A `systemctl show` answer of the DS4 head in the given state (the ghost capture's unit)."""
    values = {
        "ActiveState": active,
        "SubState": sub,
        "ExecMainStatus": str(status),
        "ExecMainCode": "1" if status else "0",
        "MainPID": str(pid if active == "active" else 0),
        "ExecMainPID": str(pid),
        "NRestarts": str(restarts),
        "Result": "exit-code" if status else "success",
        "ActiveEnterTimestampMonotonic": str(entered),
    }
    lines = [
        f"{key}={values.get(key, value)}"
        for key, _, value in (
            line.partition("=") for line in data("systemctl-show-ghost-127.txt").splitlines()
        )
    ]
    return Answer(stdout="\n".join(lines) + "\n")


def attempt(number: int) -> Answer:
    """Attempt `number` of a crash loop, alive for its few hundred ms: it looks healthy."""
    return show(
        active="active", sub="running", status=0, pid=300_000 + number, restarts=number,
        entered=93_000_000_000 + number * 30_300_000,
    )  # fmt: skip


def between(number: int) -> Answer:
    """After attempt `number` exited 127: systemd waits RestartSec in auto-restart."""
    return show(active="activating", sub="auto-restart", status=127, pid=300_000 + number,
                restarts=number)  # fmt: skip


@pytest.mark.parametrize(
    ("answers", "expected", "pauses"),
    [
        # sampled mid-attempt, then between attempts: the exit 127 is what is reported
        ([attempt(1043), between(1043)],
         {"active_state": "activating", "sub_state": "auto-restart", "exec_main_status": 127,
          "n_restarts": 1043, "samples": 2, "settled": True}, [0.5]),
        # RestartSec=100ms: the next samples catch the next attempts, then a pause between them
        ([attempt(5), attempt(6), attempt(7), between(7)],
         {"exec_main_status": 127, "n_restarts": 7, "samples": 4, "settled": True},
         [0.5, 0.5, 0.5]),
        # restarted by systemd once, long ago, and running since: settled after 2 s of one attempt
        ([attempt(1)],
         {"active_state": "active", "exec_main_status": 0, "main_pid": 300_001, "samples": 5,
          "settled": True}, [0.5, 0.5, 0.5, 0.5]),
        # never restarted by systemd: one sample is the truth
        ([Answer(stdout=data("systemctl-show-healthy.txt"))],
         {"active_state": "active", "n_restarts": 0, "samples": 1, "settled": True}, []),
        # already between two attempts: one sample
        ([between(3)], {"exec_main_status": 127, "samples": 1, "settled": True}, []),
        # start-limit-hit: failed, not moving
        ([Answer(stdout=data("systemctl-show-start-limit-hit.txt"))],
         {"active_state": "failed", "samples": 1, "settled": True}, []),
    ],
)  # fmt: skip
async def test_unit_status_samples_a_fresh_attempt_again_until_it_settles(
    collect: Collect,
    answers: list[Answer],
    expected: Mapping[str, FactValue],
    pauses: list[float],
) -> None:
    time = FakeTime()
    executor = ScriptedExecutor(answers={}, sequences={UNIT_STATUS_ARGV: answers})
    evidence = await collect("unit_status", scope=head_scope(), executor=executor, time=time)
    assert evidence.error == ""
    assert {name: evidence.facts.get(name) for name in expected} == expected
    assert time.pauses == pauses
    assert len(evidence.commands) == len(executor.calls) == expected["samples"]
    assert {call.argv for call in executor.calls} == {UNIT_STATUS_ARGV}


async def test_unit_status_reports_the_last_sample_at_the_deadline_unsettled(
    collect: Collect,
) -> None:
    time = FakeTime()
    loop = [attempt(number) for number in range(10, 30)]  # always caught mid-attempt
    executor = ScriptedExecutor(answers={}, sequences={UNIT_STATUS_ARGV: loop})
    evidence = await collect(
        "unit_status", scope=head_scope(), executor=executor, time=time,
        timeout=timedelta(seconds=2),
    )  # fmt: skip
    assert {name: evidence.facts[name] for name in ("samples", "settled", "n_restarts")} == {
        "samples": 5,
        "settled": False,
        "n_restarts": 14,
    }
    assert time.at - 1000.0 == 2.0  # never past the evidence timeout


async def test_unit_status_whose_later_sample_fails_is_an_error(collect: Collect) -> None:
    broken = Answer(status=1, stderr=f"{NO_BUS}\n")
    executor = ScriptedExecutor(answers={}, sequences={UNIT_STATUS_ARGV: [attempt(2), broken]})
    evidence = await collect("unit_status", scope=head_scope(), executor=executor, time=FakeTime())
    assert (evidence.error, dict(evidence.facts), len(evidence.commands)) == (
        f"systemctl show failed: exit 1: {NO_BUS}",
        {},
        2,
    )


async def test_unit_status_pauses_for_real_by_default(collect: Collect) -> None:
    """Without a fake clock the collector sleeps its half second between two samples."""
    executor = ScriptedExecutor(answers={}, sequences={UNIT_STATUS_ARGV: [attempt(1), between(1)]})
    started = asyncio.get_running_loop().time()
    evidence = await collect("unit_status", scope=head_scope(), executor=executor)
    assert evidence.facts["samples"] == 2
    assert asyncio.get_running_loop().time() - started >= 0.5


@pytest.mark.parametrize(
    ("facts", "mid_attempt"),
    [
        ({"n_restarts": 3, "active_state": "active", "sub_state": "running"}, True),
        ({"n_restarts": 3, "active_state": "activating", "sub_state": "start"}, True),
        ({"n_restarts": 3, "active_state": "deactivating", "sub_state": "stop-sigterm"}, True),
        ({"n_restarts": 3, "active_state": "activating", "sub_state": "auto-restart"}, False),
        ({"n_restarts": 3, "active_state": "activating", "sub_state": "auto-restart-queued"},
         False),
        ({"n_restarts": 3, "active_state": "failed", "sub_state": "failed"}, False),
        ({"n_restarts": 0, "active_state": "active", "sub_state": "running"}, False),
        ({"active_state": "active", "sub_state": "running"}, False),  # systemd < 235
        ({"n_restarts": True, "active_state": "active", "sub_state": "running"}, False),
    ],
)  # fmt: skip
def test_which_samples_may_be_mid_attempt(
    facts: Mapping[str, FactValue], mid_attempt: bool
) -> None:
    assert may_be_mid_attempt(facts) is mid_attempt


@pytest.mark.parametrize(
    ("ps", "expected", "commands"),
    [
        (Answer(stdout="python3 -m vllm.entrypoints.openai.api_server --port 8000\n"),
         {"args": "python3 -m vllm.entrypoints.openai.api_server --port 8000", "running": True}, 2),
        (Answer(status=1), {"args": "", "running": False}, 2),  # it ended meanwhile
    ],
)  # fmt: skip
async def test_command_line_reads_the_main_process(
    collect: Collect, ps: Answer, expected: Mapping[str, FactValue], commands: int
) -> None:
    answers: dict[tuple[str, ...], Answer] = {
        MAIN_PID_ARGV: Answer(stdout="48213\n"),
        ("ps", "-ww", "-o", "args=", "-p", "48213"): ps,
    }
    executor = ScriptedExecutor(answers=answers)
    evidence = await collect("command_line", scope=head_scope(), executor=executor)
    assert (evidence.error, dict(evidence.facts), len(evidence.commands)) == (
        "",
        expected,
        commands,
    )


async def test_command_line_of_a_stopped_unit_runs_no_ps(collect: Collect) -> None:
    executor = ScriptedExecutor(answers={MAIN_PID_ARGV: Answer(stdout="0\n")})
    evidence = await collect("command_line", scope=head_scope(), executor=executor)
    assert dict(evidence.facts) == {"args": "", "running": False}
    assert [call.argv for call in executor.calls] == [MAIN_PID_ARGV]


# --- journal -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "lines"),
    [(data("journal-ghost-127.txt"), 7), ("-- No entries --\n", 0), ("", 0), ("one\n\nthree\n", 3)],
)
def test_journal_text_and_line_count(text: str, lines: int) -> None:
    facts = parse_journal(text)
    assert facts["lines"] == lines
    assert facts["text"] == ("" if lines == 0 else text.rstrip("\n"))


async def test_journal_runs_journalctl_as_root_with_the_line_count(collect: Collect) -> None:
    """Never healthy as far as the daemon knows: the last lines, whenever they were written."""
    argv = ("journalctl", "-u", "vllm-ds4-head.service", "-n", "50", "--no-pager", "-o", "cat")
    executor = ScriptedExecutor(answers={argv: Answer(stdout=data("journal-ghost-127.txt"))})
    evidence = await collect("journal", {"lines": 50}, scope=head_scope(), executor=executor)
    assert evidence.facts["lines"] == 7
    assert evidence.facts["since"] == ""
    assert "bash: /workspace/vllm-head.sh: No such file or directory" in str(evidence.facts["text"])
    assert executor.calls == [Call(host="spark1", argv=argv, sudo=True)]


@pytest.mark.parametrize(
    ("last_ok_at", "epoch", "since"),
    [
        (datetime(2026, 3, 3, 7, 2, 11, 500_000, tzinfo=UTC), 1772521301, "2026-03-03T07:01:41Z"),
        # another zone is the same instant
        (datetime(2026, 3, 3, 9, 2, 11, tzinfo=timezone(timedelta(hours=2))), 1772521301,
         "2026-03-03T07:01:41Z"),
    ],
)  # fmt: skip
async def test_journal_reads_since_30s_before_the_last_passing_check(
    collect: Collect, last_ok_at: datetime, epoch: int, since: str
) -> None:
    argv = ("journalctl", "-u", "vllm-ds4-head.service", "--since", f"@{epoch}", "-n", "300",
            "--no-pager", "-o", "cat")  # fmt: skip
    executor = ScriptedExecutor(answers={argv: Answer(stdout="-- No entries --\n")})
    evidence = await collect(
        "journal", {"lines": 300}, scope=head_scope(), executor=executor, last_ok_at=last_ok_at
    )
    assert dict(evidence.facts) == {"text": "", "lines": 0, "since": since}
    assert executor.calls == [Call(host="spark1", argv=argv, sudo=True)]
    assert [result.command for result in evidence.commands] == [
        f"sudo -n journalctl -u vllm-ds4-head.service --since @{epoch} -n 300 --no-pager -o cat"
    ]


@dataclass(kw_only=True)
class JournalHost(ScriptedExecutor):
    """Answers `journalctl -u UNIT [--since @EPOCH] -n N ... -o cat` as journalctl does, from
    timestamped entries: those at or after EPOCH, the last N of them."""

    journal: Sequence[tuple[datetime, str]] = ()

    def answer(self, argv: tuple[str, ...]) -> Answer:
        if argv[:1] != ("journalctl",):
            return super().answer(argv)
        options = dict(zip(argv[1::2], argv[2::2], strict=False))
        since = options.get("--since")
        start = datetime.fromtimestamp(int(since[1:]), UTC) if since else None
        lines = [line for at, line in self.journal if start is None or at >= start]
        kept = lines[-int(options["-n"]) :]
        return Answer(stdout="".join(f"{line}\n" for line in kept) or "-- No entries --\n")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


SHM_ERROR = (
    "(EngineCore_DP0 pid=412) ERROR 06-01 22:10:31 [core.py:708] AttributeError: "
    "'ShmRingBuffer' object has no attribute 'shared_memory'"
)
#: last night's fork-shm failure (healed by a relaunch), then today's different failure
HEAD_JOURNAL = (
    (at("2026-06-01T22:10:31"), SHM_ERROR),
    (at("2026-06-01T22:10:31"), "vllm-ds4-head.service: Main process exited, status=1/FAILURE"),
    (at("2026-06-01T22:31:02"), "(APIServer pid=97) INFO Application startup complete."),
    (at("2026-06-02T09:14:55"), "(EngineCore_DP0 pid=977) ERROR RuntimeError: Worker failed "
                                "with error 'NCCL timeout', please check the stack trace above"),
    (at("2026-06-02T09:14:56"), "vllm-ds4-head.service: Main process exited, status=1/FAILURE"),
)  # fmt: skip


@pytest.mark.parametrize(
    ("last_ok_at", "verdict"),
    [
        (None, "fork-shm-ringbuffer"),  # never ok since the daemon started: the last lines
        (at("2026-06-02T09:10:00"), "unknown-failure"),  # ok this morning: the old line is out
        (at("2026-06-01T22:10:50"), "fork-shm-ringbuffer"),  # 19 s after it: within the margin
    ],
)
async def test_an_error_logged_before_the_last_passing_check_is_not_diagnosed_again(
    http: HttpClient, last_ok_at: datetime | None, verdict: str
) -> None:
    status = show(active="activating", sub="auto-restart", status=1, pid=977, restarts=2)
    executor = JournalHost(answers={UNIT_STATUS_ARGV: status}, journal=HEAD_JOURNAL)
    endpoint = Endpoint(name="ds4", kind="openai", url="http://192.168.1.11:8000", units=(HEAD,))
    config = FleetConfig(source=Path("fleet.yaml"), hosts={"spark1": SPARK1},
                         endpoints={"ds4": endpoint})  # fmt: skip
    trigger = ProbeResult(
        endpoint="ds4", tier=Tier.DEEP, check="completion", outcome=ProbeOutcome.FAIL,
        reason="connection refused", at=at("2026-06-02T09:15:30"), latency_s=0.01,
    )  # fmt: skip
    diagnosis = await diagnose(
        endpoint, config=config, state="down", trigger=trigger, playbook=SHIPPED,
        executor=executor, http=http, timeout=timedelta(seconds=5), last_ok_at=last_ok_at,
    )  # fmt: skip
    assert diagnosis.matched is not None
    assert diagnosis.matched.rule.id == verdict
    journals = [run.evidence for run in diagnosis.evidence if run.collector == "journal"]
    assert len(journals) == 1
    expected_since = "" if last_ok_at is None else since_text(journal_since(last_ok_at))
    assert journals[0].facts["since"] == expected_since


# --- commands that could not run, scopes that lack what a collector needs ------------------------


SS_ARGV = ("ss", "-Hltnp", "sport", "=", ":29501")
NO_BUS = "Failed to connect to bus: No such file or directory"
REFUSED = "cannot connect to spark1 (192.168.1.11:22): Connection refused"
PS_PID_7 = ("ps", "-ww", "-o", "args=", "-p", "7")
GREP_ARGV = ("grep", "-c", "-F", "-e", "y", "--", "/x")
FAILURES: list[tuple[str, dict[str, object], dict[tuple[str, ...], Answer], str]] = [
    ("unit_status", {}, {UNIT_STATUS_ARGV: Answer(status=1, stderr=f"{NO_BUS}\n")},
     f"systemctl show failed: exit 1: {NO_BUS}"),
    ("unit_status", {}, {UNIT_STATUS_ARGV: Answer(status=None, error=REFUSED)},
     f"systemctl show failed: {REFUSED}"),
    ("command_line", {}, {MAIN_PID_ARGV: Answer(stdout="\n")},
     "systemctl show gave no MainPID: ''"),
    ("command_line", {}, {MAIN_PID_ARGV: Answer(stdout="7\n"),
                          PS_PID_7: Answer(status=2, stderr="ps: bad -o")},
     "ps failed: exit 2: ps: bad -o"),
    ("journal", {}, {}, "journalctl failed: exit 127: command not found"),
    ("listeners", {"port": 29501}, {SS_ARGV: Answer(status=None, error="timed out after 10s")},
     "ss failed: timed out after 10s"),
    ("listeners", {"port": 29501},
     {SS_ARGV: Answer(status=1, stderr="sudo: a password is required\n")},
     "ss failed: exit 1: sudo: a password is required"),
    ("processes", {"pattern": "VLLM"}, {("ps", "-ww", "-eo", "pid=,user=,args="): Answer(status=1)},
     "ps failed: exit 1"),
    ("meminfo", {}, {("cat", "--", "/proc/meminfo"): Answer(stdout="garbage\n")},
     "/proc/meminfo has no meminfo fields"),
    ("grep_count", {"path": "/x", "pattern": "y"},
     {GREP_ARGV: Answer(status=2, stderr="grep: /x: Permission denied\n")},
     "grep failed: exit 2: grep: /x: Permission denied"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "params", "answers", "error"), FAILURES)
async def test_a_command_that_failed_is_a_plain_error(
    collect: Collect,
    name: str,
    params: Mapping[str, object],
    answers: Mapping[tuple[str, ...], Answer],
    error: str,
) -> None:
    executor = ScriptedExecutor(answers=answers)
    evidence = await collect(name, params, scope=head_scope(), executor=executor)
    assert (evidence.error, dict(evidence.facts), evidence.collector) == (error, {}, name)
    assert len(evidence.commands) == len(executor.calls) >= 1


NO_UNIT_SCOPE = Scope(endpoint=ASR, host=SPARK1, unit=None)
NO_HOST_SCOPE = Scope(endpoint=ASR, host=None, unit=None)
BARE_SCOPE = Scope(endpoint=ASR, host=FORGE, unit=BARE_UNIT)


IN_CONTAINER = {"path": "/x", "in_container": True}
SCOPE_ERRORS: list[tuple[str, dict[str, object], Scope, str]] = [
    ("unit_status", {}, NO_UNIT_SCOPE, "no unit in this scope"),
    ("unit_status", {}, NO_HOST_SCOPE, "no unit in this scope"),
    ("journal", {}, NO_UNIT_SCOPE, "no unit in this scope"),
    ("command_line", {}, NO_UNIT_SCOPE, "no unit in this scope"),
    ("meminfo", {}, NO_HOST_SCOPE, "no host in this scope"),
    ("listeners", {"port": 8000}, NO_HOST_SCOPE, "no host in this scope"),
    ("processes", {"pattern": "x"}, NO_HOST_SCOPE, "no host in this scope"),
    ("path_exists", {"path": "/x"}, NO_HOST_SCOPE, "no host in this scope"),
    ("path_exists", IN_CONTAINER, NO_UNIT_SCOPE, "no container in this scope"),
    ("grep_count", {**IN_CONTAINER, "pattern": "y"}, BARE_SCOPE, "no container in this scope"),
    ("file_text", IN_CONTAINER, BARE_SCOPE, "no container in this scope"),
]


@pytest.mark.parametrize(("name", "params", "scope", "error"), SCOPE_ERRORS)
async def test_a_scope_without_what_the_collector_needs_runs_nothing(
    collect: Collect, name: str, params: Mapping[str, object], scope: Scope, error: str
) -> None:
    executor = ScriptedExecutor(answers={})
    evidence = await collect(name, params, scope=scope, executor=executor)
    assert (evidence.error, dict(evidence.facts), evidence.collector) == (error, {}, name)
    assert executor.calls == []


# --- meminfo -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "expected"),
    [
        ("meminfo-gb10-starved.txt",
         {"mem_total_gib": 119.7, "mem_free_gib": 4.7, "mem_available_gib": 110.3,
          "cached_gib": 104.0, "buffers_gib": 0.4, "cache_gib": 104.4}),
        ("meminfo-gb10-healthy.txt",
         {"mem_total_gib": 119.7, "mem_free_gib": 116.2, "mem_available_gib": 117.5,
          "cached_gib": 1.6, "buffers_gib": 0.1, "cache_gib": 1.7}),
    ],
)  # fmt: skip
def test_meminfo_in_gib(capture: str, expected: Mapping[str, float]) -> None:
    assert parse_meminfo(data(capture)) == expected


def test_meminfo_fields_the_file_lacks_are_absent() -> None:
    assert parse_meminfo("MemTotal: 1048576 kB\nMemFree: oops kB\nCached:\n") == {
        "mem_total_gib": 1.0
    }


async def test_meminfo_reads_the_file_it_is_given(collect: Collect, tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text(data("meminfo-gb10-starved.txt"))
    evidence = await collect("meminfo", {"path": str(path)}, scope=local_scope())
    assert (evidence.error, evidence.facts["mem_free_gib"], evidence.facts["cache_gib"]) == (
        "",
        4.7,
        104.4,
    )
    assert [result.command for result in evidence.commands] == [f"cat -- {path}"]


async def test_meminfo_of_this_machine(collect: Collect) -> None:
    evidence = await collect("meminfo", scope=local_scope())
    total = evidence.facts["mem_total_gib"]
    assert isinstance(total, float)
    assert total > 0
    assert set(evidence.facts) == set(COLLECTORS["meminfo"].facts)


async def test_meminfo_of_a_missing_file_is_an_error(collect: Collect, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    evidence = await collect("meminfo", {"path": str(missing)}, scope=local_scope())
    assert evidence.error == f"cat failed: exit 1: cat: {missing}: No such file or directory"


# --- listeners -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "count", "owners"),
    [
        ("ss-several-owners.txt", 2, {4242: "VLLM::Worker_TP", 4243: "python3"}),
        ("ss-none.txt", 0, {}),
        ("ss-ipv6.txt", 2, {51234: "vllm"}),
        ("ss-foreign.txt", 1, {777: "nc"}),
        ("ss-no-owner.txt", 1, {}),
    ],
)
def test_ss_listeners_and_owners(capture: str, count: int, owners: Mapping[int, str]) -> None:
    sockets = parse_ss(data(capture))
    assert (sockets.count, dict(sockets.owners)) == (count, owners)


def test_ps_pid_args() -> None:
    text = "    1 /sbin/init splash\n 4242 VLLM::Worker_TP0\nrubbish\n 99 \n"
    assert parse_pid_args(text) == {1: "/sbin/init splash", 4242: "VLLM::Worker_TP0"}


async def test_listeners_names_each_owner_once_falling_back_to_the_ss_name(
    collect: Collect,
) -> None:
    ss = ("ss", "-Hltnp", "sport", "=", ":29501")
    ps = ("ps", "-ww", "-o", "pid=,args=", "-p", "4242,4243")
    answers: dict[tuple[str, ...], Answer] = {
        ss: Answer(stdout=data("ss-several-owners.txt")),
        ps: Answer(stdout=" 4242 VLLM::Worker_TP0\n"),  # 4243 ended meanwhile
    }
    executor = ScriptedExecutor(answers=answers)
    evidence = await collect("listeners", {"port": 29501}, scope=head_scope(), executor=executor)
    assert dict(evidence.facts) == {
        "count": 2,
        "pids": (4242, 4243),
        "commands": ("VLLM::Worker_TP0", "python3"),
    }
    assert [(call.argv, call.sudo) for call in executor.calls] == [(ss, True), (ps, False)]


def own_command_line() -> str:
    return " ".join(
        part.decode() for part in Path("/proc/self/cmdline").read_bytes().split(b"\0") if part
    )


needs_ss = pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) is not installed")


@pytest.mark.sudo
@needs_ss
async def test_listeners_finds_a_real_socket_and_its_owner(collect: Collect) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        evidence = await collect("listeners", {"port": port}, scope=local_scope())
    assert evidence.error == ""
    assert dict(evidence.facts) == {
        "count": 1,
        "pids": (os.getpid(),),
        "commands": (own_command_line(),),
    }


@pytest.mark.sudo
@needs_ss
async def test_listeners_counts_ipv4_and_ipv6_sockets_of_one_owner(collect: Collect) -> None:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as six:
        try:
            six.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        six.listen()
        port = six.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as four:
            four.bind(("127.0.0.1", port))
            four.listen()
            evidence = await collect("listeners", {"port": port}, scope=local_scope())
    assert (evidence.facts["count"], evidence.facts["pids"]) == (2, (os.getpid(),))


@pytest.mark.sudo
@needs_ss
async def test_listeners_on_a_free_port(collect: Collect) -> None:
    evidence = await collect("listeners", {"port": free_port()}, scope=local_scope())
    assert dict(evidence.facts) == {"count": 0, "pids": (), "commands": ()}
    assert len(evidence.commands) == 1  # no ps without owners


# --- processes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "user", "pids"),
    [
        (r"^VLLM::Worker_TP\d+$", None, (4242, 4243)),
        ("VLLM::Worker", None, (4242, 4243, 6120)),  # the pattern is applied as written
        ("VLLM::EngineCore", "vllm", (4301,)),
        ("VLLM::EngineCore", "averyveryverylongusername", (4302,)),  # ps cut it to `averyve+`
        ("VLLM::EngineCore", "averyve", ()),
        ("VLLM::EngineCore", "averyvex", ()),
        ("ps -ww -eo", None, ()),  # ps's own line is not a process of the fleet
        (r"vllm serve .*--enable-expert-parallel", "vllm", (4100,)),
    ],
)
def test_processes_select(pattern: str, user: str | None, pids: tuple[int, ...]) -> None:
    chosen = select_processes(parse_ps(data("ps-vllm-host.txt")), pattern, user)
    assert tuple(process.pid for process in chosen) == pids


#: a worker's title, long enough that a `ps` cut to $COLUMNS would lose its end
WORKER_TITLE = "VLLM::Worker_TP0 " + "--padding " * 20 + "end"


@pytest.fixture
async def worker() -> AsyncIterator[asyncio.subprocess.Process]:
    """A real process that calls itself `VLLM::Worker_TP0 ...`, as vLLM's workers do."""
    argv = ["bash", "-c", 'exec -a "$0" sleep 60', WORKER_TITLE]
    proc = await asyncio.create_subprocess_exec(*argv)
    yield proc
    proc.kill()
    await proc.wait()


async def test_processes_finds_a_real_renamed_process(
    collect: Collect, worker: asyncio.subprocess.Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")  # ps must still print whole command lines
    me = pwd.getpwuid(os.geteuid()).pw_name
    params = {"pattern": r"^VLLM::Worker_TP\d+ ", "user": me}
    evidence: list[CollectedEvidence] = []

    async def listed() -> bool:
        evidence.append(await collect("processes", params, scope=local_scope()))
        pids = evidence[-1].facts["pids"]
        return isinstance(pids, tuple) and worker.pid in pids

    await eventually(listed, within=5, what="the renamed worker in ps")
    facts = evidence[-1].facts
    pids, commands, users = facts["pids"], facts["commands"], facts["users"]
    assert isinstance(pids, tuple)
    assert isinstance(commands, tuple)
    assert isinstance(users, tuple)
    index = pids.index(worker.pid)
    assert commands[index] == f"{WORKER_TITLE} 60"
    assert users[index] == (me[:7] + "+" if len(me) > 8 else me)
    other = await collect("processes", {**params, "user": "nobody-else"}, scope=local_scope())
    assert other.facts["pids"] == ()
    assert evidence[-1].facts["count"] == len(pids) >= 1


# --- files: grep_count, path_exists, file_text ---------------------------------------------------

MXFP4 = """\
def _setup_kernel(self, layer, w13, w2):
    convert(layer, w13, w2)
    del w13, w2
    torch.cuda.empty_cache()
"""


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "none.py").write_text("import torch\n")
    (tmp_path / "two.py").write_text(MXFP4 * 2)
    (tmp_path / "three.py").write_text(MXFP4 * 3)
    return tmp_path


@pytest.mark.parametrize(
    ("file", "facts"),
    [
        ("none.py", {"count": 0, "exists": True}),
        ("two.py", {"count": 2, "exists": True}),
        ("three.py", {"count": 3, "exists": True}),
        ("missing.py", {"count": 0, "exists": False}),
    ],
)
async def test_grep_count_on_real_files(
    collect: Collect, files: Path, file: str, facts: Mapping[str, FactValue]
) -> None:
    params = {"path": str(files / file), "pattern": "torch.cuda.empty_cache()"}
    evidence = await collect("grep_count", params, scope=local_scope())
    assert (evidence.error, dict(evidence.facts)) == ("", facts)


async def test_grep_count_pattern_is_fixed_text_not_a_regex(collect: Collect, files: Path) -> None:
    params = {"path": str(files / "two.py"), "pattern": "empty_cache.*"}
    evidence = await collect("grep_count", params, scope=local_scope())
    assert evidence.facts["count"] == 0


@pytest.mark.parametrize(("file", "exists"), [("two.py", True), ("missing.py", False), (".", True)])
async def test_path_exists_on_real_paths(
    collect: Collect, files: Path, file: str, exists: bool
) -> None:
    evidence = await collect("path_exists", {"path": str(files / file)}, scope=local_scope())
    assert (evidence.error, dict(evidence.facts)) == ("", {"exists": exists})


@pytest.mark.parametrize(
    ("file", "max_bytes", "facts"),
    [
        ("none.py", 65536, {"text": "import torch\n", "exists": True}),
        ("none.py", 6, {"text": "import", "exists": True}),
        ("missing.py", 65536, {"text": "", "exists": False}),
    ],
)
async def test_file_text_on_real_files(
    collect: Collect, files: Path, file: str, max_bytes: int, facts: Mapping[str, FactValue]
) -> None:
    params = {"path": str(files / file), "max_bytes": max_bytes}
    evidence = await collect("file_text", params, scope=local_scope())
    assert (evidence.error, dict(evidence.facts)) == ("", facts)


async def test_file_text_of_a_folder_is_an_error(collect: Collect, files: Path) -> None:
    evidence = await collect("file_text", {"path": str(files)}, scope=local_scope())
    assert evidence.error == f"head failed: exit 1: head: error reading '{files}': Is a directory"


async def test_a_command_that_hangs_times_out(collect: Collect, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # head blocks opening it: nobody ever writes
    params = {"path": str(fifo)}
    timeout = timedelta(milliseconds=200)
    evidence = await collect("file_text", params, scope=local_scope(), timeout=timeout)
    assert evidence.error == "head failed: timed out after 200ms"


FAKE_DOCKER = """\
#!/bin/sh
# docker exec [flags] NAME CMD...: runs CMD here, as if inside NAME; `stopped` is not running
[ "$1" = exec ] || { echo "fake docker: only exec" >&2; exit 2; }
shift
echo "$1" >> "$(dirname "$0")/containers"
if [ "$1" = stopped ]; then
  echo "Error response from daemon: container $1 is not running" >&2; exit 1
fi
shift
exec "$@"
"""


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `docker` first on PATH whose `exec` runs the command on this machine."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "docker"
    script.write_text(FAKE_DOCKER)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder / "containers"


def container_scope(container: str) -> Scope:
    return local_scope(UnitRef(host="forge", unit="vllm-ds4-head.service", container=container))


@pytest.mark.sudo
@pytest.mark.parametrize(("file", "count"), [("none.py", 0), ("two.py", 2), ("three.py", 3)])
async def test_grep_count_inside_the_container(
    collect: Collect, files: Path, docker: Path, file: str, count: int
) -> None:
    params = {"path": str(files / file), "pattern": "empty_cache", "in_container": True}
    evidence = await collect("grep_count", params, scope=container_scope("vllm_ds4"))
    assert (evidence.error, evidence.facts["count"]) == ("", count)
    assert await asyncio.to_thread(docker.read_text) == "vllm_ds4\n"
    assert evidence.commands[0].command.startswith("docker exec vllm_ds4 grep -c -F -e empty_cache")


@pytest.mark.sudo
@pytest.mark.parametrize("name", ["path_exists", "grep_count", "file_text"])
async def test_a_stopped_container_is_an_error_not_a_missing_file(
    collect: Collect, files: Path, docker: Path, name: str
) -> None:
    params = {"path": str(files / "two.py"), "in_container": True}
    if name == "grep_count":
        params["pattern"] = "empty_cache"
    evidence = await collect(name, params, scope=container_scope("stopped"))
    what = {"path_exists": "test", "grep_count": "grep", "file_text": "head"}[name]
    expected = (
        f"{what} failed: exit 1: Error response from daemon: container stopped is not running"
    )
    assert (evidence.error, dict(evidence.facts)) == (expected, {})


@pytest.mark.sudo
async def test_path_exists_inside_the_container(
    collect: Collect, files: Path, docker: Path
) -> None:
    scope = container_scope("vllm_ds4")
    there = await collect(
        "path_exists", {"path": str(files / "two.py"), "in_container": True}, scope=scope
    )
    gone = await collect(
        "path_exists", {"path": str(files / "gone.sh"), "in_container": True}, scope=scope
    )
    assert (there.facts["exists"], gone.facts["exists"]) == (True, False)


# --- metrics -------------------------------------------------------------------------------------


def test_metrics_sums_label_sets_and_takes_the_fullest_kv_cache() -> None:
    assert parse_metrics(data("metrics-vllm-two-engines.txt")) == {
        "num_requests_running": 5.0,
        "num_requests_waiting": 1.0,
        "kv_cache_usage_perc": 0.8125,
        "num_preemptions_total": 2.0,
        "prompt_tokens_total": 2201766.0,
        "generation_tokens_total": 700000.0,
    }


def test_metrics_old_names_odd_labels_timestamps_and_nan() -> None:
    assert parse_metrics(data("metrics-vllm-old-names.txt")) == {
        "kv_cache_usage_perc": 0.25,
        "num_requests_running": 1.0,
    }


async def test_metrics_of_the_vllm_sim(collect: Collect, sim: VllmSim, http: HttpClient) -> None:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert (await http.post(sim.url + "/v1/chat/completions", json=body)).status_code == 200
    endpoint = Endpoint(name="sim", kind="openai", url=sim.url, model="sim-model")
    evidence = await collect("metrics", scope=Scope(endpoint=endpoint, host=None, unit=None))
    assert dict(evidence.facts) == {
        "available": True,
        "reason": "",
        "num_requests_running": 0.0,
        "num_requests_waiting": 0.0,
        "kv_cache_usage_perc": 0.0,
        "generation_tokens_total": float(sim.metrics.generation_tokens),
        "prompt_tokens_total": float(sim.metrics.prompt_tokens),
        "num_preemptions_total": 0.0,
    }
    assert sim.metrics.generation_tokens > 0


async def test_metrics_unavailable(collect: Collect, sim_factory: SimFactory) -> None:
    ollama = await sim_factory(flavour="ollama")
    hung = await sim_factory(SimBehaviour(hang=True))
    closed = f"http://127.0.0.1:{free_port()}"
    short, ample = timedelta(milliseconds=300), timedelta(seconds=10)  # ample: a busy CI box
    reasons = {}
    for url, timeout in ((ollama.url, ample), (hung.url, short), (closed, ample)):
        endpoint = Endpoint(name="x", kind="openai", url=url, model="m")
        scope = Scope(endpoint=endpoint, host=None, unit=None)
        evidence = await collect("metrics", scope=scope, timeout=timeout)
        assert (evidence.error, evidence.facts["available"]) == ("", False)
        reasons[url] = evidence.facts["reason"]
    assert reasons[ollama.url] == "HTTP 404"
    assert reasons[hung.url] == "timed out after 300ms"
    assert reasons[closed] == f"cannot reach {closed}/metrics: connection refused"


# --- parsers never raise -------------------------------------------------------------------------

PARSERS: tuple[Callable[[str], object], ...] = (
    parse_unit_status,
    parse_exec_start,
    parse_main_pid,
    parse_journal,
    parse_meminfo,
    parse_ss,
    parse_pid_args,
    parse_ps,
)


@settings(max_examples=150, database=None)
@example(":²")  # found by CI: str.isdigit() is true of "²", which int() refuses
@example("² x")
@given(st.text(alphabet=st.sampled_from('abc019 =:{}()",;[]-+/\\\n\t.#_Ee') | st.characters()))
def test_parsers_never_raise(text: str) -> None:
    for parse in PARSERS:
        parse(text)
    with contextlib.suppress(MetricsFormatError):  # the collector makes it `available: false`
        parse_metrics(text)
    parse_exec_start(f"{{ path={text} ; argv[]={text} ; ignore_errors=no }}")


# --- the registry and in_container ---------------------------------------------------------------


def test_the_registry_has_every_collector_of_the_design() -> None:
    assert sorted(COLLECTORS) == sorted(
        ["unit_status", "journal", "meminfo", "listeners", "processes", "grep_count",
         "path_exists", "file_text", "command_line", "metrics", "progress", "launchd_job",
         "launchd_log", "mac_listeners", "mac_memory"]
    )  # fmt: skip
    for name, entry in COLLECTORS.items():
        assert entry.name == name
        assert entry.doc.strip()
        assert "\n" not in entry.doc
        assert entry.facts
        assert all(meaning.strip() for meaning in entry.facts.values())
        assert issubclass(entry.params, CollectorParams)
        assert entry.needs_host is (name not in ("metrics", "progress"))


@pytest.mark.parametrize(
    ("name", "params", "loc", "message"),
    [
        ("listeners", {"port": 29501, "prot": 1}, ("prot",), "Extra inputs are not permitted"),
        ("listeners", {"port": "29501"}, ("port",), "Input should be a valid integer"),
        ("listeners", {"port": 0}, ("port",), "Input should be greater than or equal to 1"),
        ("listeners", {}, ("port",), "Field required"),
        ("unit_status", {"unit": "x"}, ("unit",), "Extra inputs are not permitted"),
        ("journal", {"lines": 0}, ("lines",), "Input should be greater than or equal to 1"),
        ("processes", {"pattern": "VLLM::(Worker"}, ("pattern",),
         "Value error, not a valid regular expression: "
         "missing ), unterminated subpattern at position 6"),
        ("processes", {"pattern": ""}, ("pattern",), "String should have at least 1 character"),
        ("grep_count", {"path": "/x", "pattern": "y", "in_container": "yes"}, ("in_container",),
         "Input should be a valid boolean"),
        ("file_text", {"path": "/x", "max_bytes": 10**9}, ("max_bytes",),
         "Input should be less than or equal to 262144"),
    ],
)  # fmt: skip
def test_bad_params_are_refused_with_a_plain_message(
    name: str, params: Mapping[str, object], loc: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        COLLECTORS[name].params.model_validate(params)
    assert [(error["loc"], error["msg"]) for error in info.value.errors()] == [(loc, message)]


def _module(name: str, **values: object) -> ModuleType:
    module = ModuleType(name)
    vars(module).update(values)
    return module


async def _nothing(ctx: CollectContext, params: NoEvidenceParams) -> CollectedEvidence:
    return found({"x": 1})


def test_collectors_of_modules_and_duplicate_names() -> None:
    first = collector("probe_one", params=NoEvidenceParams, doc="one", facts={"x": "x"})(_nothing)
    again = collector("probe_one", params=NoEvidenceParams, doc="two", facts={"x": "x"})(_nothing)
    mapping = collectors_of([_module("a", first=first, alias=first, other=3)])
    assert dict(mapping) == {"probe_one": first}
    with pytest.raises(ValueError, match=r"^two collectors are called 'probe_one'$"):
        collectors_of([_module("a", first=first), _module("b", again=again)])


@pytest.mark.parametrize(
    ("name", "doc", "facts", "message"),
    [
        (
            "Bad-Name",
            "doc",
            {"x": "x"},
            r"collector name must match [a-z][a-z0-9_]*, got 'Bad-Name'",
        ),
        (
            "two_lines",
            "one\ntwo",
            {"x": "x"},
            "collector two_lines: doc must be one non-empty line",
        ),
        ("no_facts", "doc", {}, "collector no_facts: declares no facts"),
    ],
)
def test_collector_declaration_mistakes(
    name: str, doc: str, facts: Mapping[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        collector(name, params=NoEvidenceParams, doc=doc, facts=facts)


async def test_the_declared_collector_stamps_its_name(collect: Collect) -> None:
    declared = collector(
        "probe_two", params=NoEvidenceParams, doc="d", facts={"x": "x"}, needs_host=False
    )(_nothing)
    ctx = CollectContext(
        scope=NO_HOST_SCOPE, executor=ScriptedExecutor(answers={}), timeout=timedelta(seconds=1),
        http=HttpClient(),
    )  # fmt: skip
    async with ctx.http:
        evidence = await declared.run(ctx, NoEvidenceParams())
    assert (evidence.collector, dict(evidence.facts)) == ("probe_two", {"x": 1})


def test_in_container_builds_the_docker_exec_line() -> None:
    assert in_container("vllm_ds4", ["grep", "-c", "x y"]) == [
        "docker",
        "exec",
        "vllm_ds4",
        "grep",
        "-c",
        "x y",
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("-u root", "not a container name: '-u root'"),
        ("", "not a container name: ''"),
        ("vllm ds4", "not a container name: 'vllm ds4'"),
        ("_x", "not a container name: '_x'"),
    ],
)
def test_in_container_refuses_what_is_not_a_container_name(name: str, message: str) -> None:
    with pytest.raises(ContainerNameError) as info:
        in_container(name, ["true"])
    assert str(info.value) == message


def test_in_container_needs_a_command() -> None:
    with pytest.raises(ValueError, match=r"^in_container needs a command to run$"):
        in_container("vllm_ds4", [])
