"""Executors against real things: OpenSSH's sshd on 127.0.0.21 (see `tests/sshd.py`), real
subprocesses, a silent TCP listener. Errors are asserted word for word."""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import asyncssh
import pytest
import structlog

from supervisor.config.supervised import Host
from supervisor.execute.base import CommandResult, command_line
from supervisor.execute.dryrun import DryRunExecutor
from supervisor.execute.fleet import FleetExecutor, UnknownHostError
from supervisor.execute.local import MAX_OUTPUT, LocalExecutor
from supervisor.execute.ssh import MAX_SESSIONS, SshExecutor, lost_reason
from supervisor.hear.streams.local import LocalTransport
from tests.helpers import eventually
from tests.ports import free_port
from tests.sshd import Sshd, skip_unless_sshd_runs

SECOND = timedelta(seconds=5)
SHORT = timedelta(milliseconds=300)
#: Long enough that a loaded CI box still prints the first line before the deadline.
PARTIAL = timedelta(seconds=2)


@pytest.fixture
async def ssh() -> AsyncIterator[SshExecutor]:
    executor = SshExecutor()
    yield executor
    await executor.close()


@pytest.fixture
async def silent_peer() -> AsyncIterator[int]:
    """A TCP listener on 127.0.0.21 that accepts and never says a word (no SSH banner)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.21", 0)
    yield server.sockets[0].getsockname()[1]
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


def running(marker: str) -> list[int]:
    """Pids of processes whose command line holds `marker` (sshd runs on this box)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_exit_status_and_output(sshd: Sshd, ssh: SshExecutor) -> None:
    argv = ["sh", "-c", "echo out; echo err >&2; exit 3"]
    result = await ssh.run(sshd.host, argv, timeout=SECOND)
    assert (result.exit_status, result.stdout, result.stderr, result.error) == (
        3,
        "out\n",
        "err\n",
        "",
    )
    assert result.command == "sh -c 'echo out; echo err >&2; exit 3'" == command_line(argv)
    assert result.host == "spark1"
    assert not result.ok


@pytest.mark.parametrize(
    "value",
    [
        "two words",
        "it's \"quoted\" and 'single'",
        "a; touch {marker}",
        "$(touch {marker})",
        "`touch {marker}`",
        "line one\nline two; touch {marker}\n",
        "*",
        "",
        "> {marker}",
        "-- | touch {marker} &",
    ],
)
async def test_arguments_arrive_literally(
    sshd: Sshd, ssh: SshExecutor, tmp_path: Path, value: str
) -> None:
    marker = tmp_path / "injected"
    text = value.format(marker=marker)
    result = await ssh.run(sshd.host, ["printf", "%s", text], timeout=SECOND)
    assert (result.exit_status, result.stdout, result.error) == (0, text, "")
    assert not marker.exists()


async def test_stdin_and_sudo(sshd: Sshd, ssh: SshExecutor) -> None:
    piped = await ssh.run(sshd.host, ["cat"], timeout=SECOND, stdin="hello\nworld")
    assert (piped.exit_status, piped.stdout) == (0, "hello\nworld")
    no_stdin = await ssh.run(sshd.host, ["cat"], timeout=SECOND)
    assert (no_stdin.exit_status, no_stdin.stdout) == (0, "")
    root = await ssh.run(sshd.host, ["id", "-u"], timeout=SECOND, sudo=True)
    assert root.command == "sudo -n id -u"
    assert (root.exit_status, root.stdout, root.error) == (0, "0\n", "")


async def test_output_keeps_the_last_256_kib(sshd: Sshd, ssh: SshExecutor) -> None:
    script = "head -c 400000 /dev/zero | tr '\\0' a; printf END; echo warn >&2"
    result = await ssh.run(sshd.host, ["sh", "-c", script], timeout=SECOND)
    assert len(result.stdout) == MAX_OUTPUT
    assert result.stdout.endswith("aaaEND")
    assert result.stderr == "warn\n"


async def test_undecodable_output_is_replaced(sshd: Sshd, ssh: SshExecutor) -> None:
    result = await ssh.run(sshd.host, ["printf", "ok\\377\\n"], timeout=SECOND)
    assert result.stdout == "ok\ufffd\n"


async def test_timeout_keeps_partial_output_and_stops_the_command(
    sshd: Sshd, ssh: SshExecutor
) -> None:
    marker = "fleet-timeout-marker"
    script = "echo started; echo oops >&2; while :; do sleep 0.05; echo tick; done"
    warm = await ssh.run(sshd.host, ["true"], timeout=SECOND)  # the login is not on the clock
    assert warm.ok, warm.error
    started = time.monotonic()
    result = await ssh.run(sshd.host, ["sh", "-c", script, marker], timeout=PARTIAL)
    assert time.monotonic() - started < 4
    assert result.error == "timed out after 2s"
    assert result.exit_status is None
    assert result.stdout.startswith("started\n")
    assert result.stderr == "oops\n"
    await eventually(lambda: not running(marker), within=3, what="the remote command to end")
    again = await ssh.run(sshd.host, ["echo", "next"], timeout=SECOND)
    assert (again.stdout, sshd.logins()) == ("next\n", 1)


def _other_key_line(sshd: Sshd) -> str:
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    return f"[{sshd.address}]:{sshd.port} {other}\n"


@pytest.mark.parametrize(
    "known_hosts", [lambda sshd: "", _other_key_line], ids=["unknown", "mismatched"]
)
async def test_untrusted_host_key_is_refused(
    sshd: Sshd, ssh: SshExecutor, tmp_path: Path, known_hosts: Callable[[Sshd], str]
) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(known_hosts(sshd))
    host = sshd.host.model_copy(update={"known_hosts": path})
    result = await ssh.run(host, ["true"], timeout=SECOND)
    assert result.error == (
        f"host key of spark1 (127.0.0.21:{sshd.port}) is not trusted: "
        "host key is not trusted for host 127.0.0.21"
    )
    assert (result.exit_status, result.ok, sshd.logins()) == (None, False, 0)


async def test_unchecked_host_key_connects_and_warns_once(
    sshd: Sshd, ssh: SshExecutor, tmp_path: Path
) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    host = sshd.host.model_copy(update={"known_hosts": empty, "check_host_key": False})
    with structlog.testing.capture_logs() as logs:
        first = await ssh.run(host, ["echo", "in"], timeout=SECOND)
        second = await ssh.run(host, ["echo", "again"], timeout=SECOND)
    assert (first.stdout, second.stdout) == ("in\n", "again\n")
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warnings == [
        {"event": "ssh host key checks are off", "host": "spark1", "log_level": "warning"}
    ]


async def test_known_hosts_default_is_used(sshd: Sshd) -> None:
    executor = SshExecutor(known_hosts_default=sshd.known_hosts)
    try:
        result = await executor.run(
            sshd.host.model_copy(update={"known_hosts": None}), ["true"], timeout=SECOND
        )
    finally:
        await executor.close()
    assert (result.exit_status, result.error) == (0, "")


def _encrypted_key(path: Path) -> Path:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path.write_bytes(key.export_private_key("pkcs8-pem", passphrase="s3cret-passphrase"))
    return path


def _unauthorised_key(path: Path) -> Path:
    path.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    return path


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            lambda sshd, tmp: {"key": _unauthorised_key(tmp / "stranger")},
            "authentication failed for root@spark1 (127.0.0.21:{port})",
        ),
        (
            lambda sshd, tmp: {"key": tmp / "missing_key"},
            "cannot load SSH key {tmp}/missing_key for spark1: no such file or directory",
        ),
        (
            lambda sshd, tmp: {"key": _encrypted_key(tmp / "locked")},
            "cannot load SSH key {tmp}/locked for spark1: "
            "passphrase must be specified to import encrypted private keys",
        ),
        (
            lambda sshd, tmp: {"known_hosts": tmp / "missing_known_hosts"},
            "cannot read known_hosts file {tmp}/missing_known_hosts for spark1: "
            "no such file or directory",
        ),
        (
            lambda sshd, tmp: {"port": free_port("127.0.0.21")},
            "cannot connect to spark1 (127.0.0.21:{port}): connection refused",
        ),
    ],
    ids=["auth", "missing-key", "encrypted-key", "missing-known-hosts", "refused"],
)
async def test_cannot_log_in(
    sshd: Sshd,
    ssh: SshExecutor,
    tmp_path: Path,
    change: Callable[[Sshd, Path], dict[str, object]],
    error: str,
) -> None:
    host = sshd.host.model_copy(update=change(sshd, tmp_path))
    result = await ssh.run(host, ["true"], timeout=SECOND)
    assert result.error == error.format(port=host.port, tmp=tmp_path)
    assert (result.exit_status, result.ok) == (None, False)
    assert "s3cret" not in result.error
    assert "PRIVATE KEY" not in result.error


async def test_silent_peer_times_out_on_time(ssh: SshExecutor, silent_peer: int) -> None:
    host = Host(name="spark1", address="127.0.0.21", port=silent_peer, check_host_key=False)
    started = time.monotonic()
    result = await ssh.run(host, ["true"], timeout=SHORT)
    assert time.monotonic() - started < 1.0
    assert (
        result.error
        == f"cannot connect to spark1 (127.0.0.21:{silent_peer}): timed out after 300ms"
    )


async def test_one_connection_serves_many_commands(sshd: Sshd, ssh: SshExecutor) -> None:
    for number in range(5):
        result = await ssh.run(sshd.host, ["echo", str(number)], timeout=SECOND)
        assert result.stdout == f"{number}\n"
    assert sshd.logins() == 1


async def test_concurrent_commands_share_one_connection(
    sshd: Sshd, ssh: SshExecutor, tmp_path: Path
) -> None:
    """12 commands at once (more than OpenSSH's 10 sessions per connection): each checks in,
    then waits until `MAX_SESSIONS` have checked in, which only happens if they run together."""
    room = tmp_path / "room"
    room.mkdir()
    script = (
        'touch "$1/$2"; while [ "$(ls "$1" | wc -l)" -lt "$3" ]; do sleep 0.02; done; echo "$2"'
    )
    results = await asyncio.gather(
        *(
            ssh.run(
                sshd.host,
                ["sh", "-c", script, "sh", str(room), str(n), str(MAX_SESSIONS)],
                timeout=SECOND,
            )
            for n in range(12)
        )
    )
    assert [(result.stdout, result.error) for result in results] == [
        (f"{n}\n", "") for n in range(12)
    ]
    assert sshd.logins() == 1


async def test_a_session_sshd_refuses_while_its_slots_are_full_is_asked_for_again(
    tmp_path: Path, ssh: SshExecutor
) -> None:
    """sshd frees a session's slot only when it reads the client's close, late on a loaded
    host: it then refuses a new session ("open failed") although fewer than MaxSessions run.
    Here MaxSessions is 2 and `MAX_SESSIONS` commands start at once."""
    skip_unless_sshd_runs()
    server = Sshd(tmp_path / "sshd", options=("MaxSessions 2",))
    server.start()
    try:
        results = await asyncio.gather(
            *(
                ssh.run(server.host, ["echo", str(n)], timeout=5 * SECOND)
                for n in range(MAX_SESSIONS)
            )
        )
    finally:
        server.stop()
    assert [(result.stdout, result.error) for result in results] == [
        (f"{n}\n", "") for n in range(MAX_SESSIONS)
    ]
    assert server.logins() == 1


async def test_reconnects_after_sshd_restarts(sshd: Sshd, ssh: SshExecutor) -> None:
    assert (await ssh.run(sshd.host, ["echo", "before"], timeout=SECOND)).stdout == "before\n"
    sshd.stop()
    down = await ssh.run(sshd.host, ["echo", "down"], timeout=SECOND)
    assert down.error == f"cannot connect to spark1 (127.0.0.21:{sshd.port}): connection refused"
    sshd.start()
    after = await ssh.run(sshd.host, ["echo", "after"], timeout=SECOND)
    assert (after.stdout, after.error) == ("after\n", "")
    assert sshd.logins() == 2


async def test_restart_without_a_failed_command_in_between(sshd: Sshd, ssh: SshExecutor) -> None:
    assert (await ssh.run(sshd.host, ["true"], timeout=SECOND)).ok
    sshd.stop()
    sshd.start()
    after = await ssh.run(sshd.host, ["echo", "after"], timeout=SECOND)
    assert (after.stdout, after.error, sshd.logins()) == ("after\n", "", 2)


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        # however the end of a connection the host closed reaches the client: one sentence
        (asyncssh.ConnectionLost("Connection lost"), "the host closed the connection"),
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), "the host closed the connection"),
        (ConnectionResetError(errno.ECONNRESET, "reset"), "the host closed the connection"),
        (OSError(errno.ETIMEDOUT, "timed out"), "connection timed out"),
    ],
)
def test_a_connection_lost_mid_command_is_one_sentence(exc: BaseException, said: str) -> None:
    assert lost_reason(exc) == f"connection lost: {said}"


async def test_connection_lost_mid_command(sshd: Sshd, ssh: SshExecutor) -> None:
    marker = "fleet-lost-marker"
    task = asyncio.create_task(
        ssh.run(sshd.host, ["sh", "-c", "echo started; sleep 5", marker], timeout=SECOND)
    )
    await eventually(lambda: bool(running(marker)), within=3, what="the command to start")
    assert sshd.drop_connections() == 1
    result = await task
    assert (result.error, result.exit_status) == (
        "connection lost: the host closed the connection",
        None,
    )
    again = await ssh.run(sshd.host, ["echo", "back"], timeout=SECOND)
    assert (again.stdout, sshd.logins()) == ("back\n", 2)


async def test_local_executor_keeps_partial_output_on_timeout(tmp_path: Path) -> None:
    host = Host(name="forge", local=True)
    script = "echo started; echo oops >&2; sleep 5"
    result = await LocalExecutor().run(host, ["sh", "-c", script], timeout=PARTIAL)
    assert (result.error, result.exit_status) == ("timed out after 2s", None)
    assert (result.stdout, result.stderr) == ("started\n", "oops\n")
    piped = await LocalExecutor().run(host, ["cat"], timeout=SECOND, stdin="x\ny")
    assert (piped.stdout, piped.exit_status) == ("x\ny", 0)


def _exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _by_executor(argv: list[str]) -> Awaitable[object]:
    return LocalExecutor().run(Host(name="forge", local=True), argv, timeout=timedelta(minutes=1))


def _by_transport(argv: list[str]) -> Awaitable[object]:
    return LocalTransport(Host(name="forge", local=True)).run(argv, timeout=60)


@pytest.mark.parametrize(
    "run", [_by_executor, _by_transport], ids=["LocalExecutor", "the event stream's transport"]
)
async def test_a_local_command_whose_caller_is_cancelled_is_killed_and_reaped(
    tmp_path: Path, run: Callable[[list[str]], Awaitable[object]]
) -> None:
    """The daemon stopping cancels what runs: the command ends with the call, not after it
    (a process left running, its pipes open, warned at the next garbage collection)."""
    pidfile = tmp_path / "pid"
    script = f"echo $$ > {pidfile}.new; mv {pidfile}.new {pidfile}; exec sleep 60"
    task = asyncio.ensure_future(run(["sh", "-c", script]))
    await eventually(pidfile.exists, within=10, what="the command to start")
    pid = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not _exists(pid)  # killed, and waited for (no zombie either)


async def test_fleet_executor_routes_by_local(sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    local = Host(name="forge", local=True)
    fleet = FleetExecutor({"forge": local, "spark1": sshd.host})
    try:
        remote = await fleet.run(
            fleet.host("spark1"), ["printenv", "SSH_CONNECTION"], timeout=SECOND
        )
        here = await fleet.run(fleet.host("forge"), ["printenv", "SSH_CONNECTION"], timeout=SECOND)
    finally:
        await fleet.close()
    assert remote.exit_status == 0
    assert remote.stdout.split()[2:] == ["127.0.0.21", str(sshd.port)]
    assert (here.exit_status, here.stdout) == (1, "")
    assert sshd.logins() == 1
    with pytest.raises(UnknownHostError, match=r"^unknown host 'nope' \(hosts: forge, spark1\)$"):
        fleet.host("nope")


async def test_dry_run_runs_reads_and_records_writes(tmp_path: Path) -> None:
    host = Host(name="forge", local=True)
    dry = DryRunExecutor(LocalExecutor())
    target = tmp_path / "created"
    read = await dry.run(host, ["echo", "evidence"], timeout=SECOND)
    write = await dry.run(host, ["touch", str(target)], timeout=SECOND, mutating=True)
    root = await dry.run(
        host, ["systemctl", "restart", "x y"], timeout=SECOND, mutating=True, sudo=True
    )
    assert (read.stdout, read.dry_run) == ("evidence\n", False)
    assert not target.exists()
    assert write == CommandResult(
        host="forge",
        command=f"touch {target}",
        exit_status=None,
        stdout="",
        stderr="",
        duration_s=0.0,
        dry_run=True,
    )
    assert (write.ok, write.summary()) == (True, "dry run")
    assert root.command == "sudo -n systemctl restart 'x y'"
    assert dry.planned == [write, root]
