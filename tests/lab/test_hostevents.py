"""Host events against real systemd and real sshd: a lab host of its own (`evlab1`), a unit
that dies on demand, and the stream over SSH and locally (nsenter standing in for the box the
daemon runs on). A unit death is an event within a second, carrying its journal lines; killing
the stream's SSH session loses no event (the resumed stream replays it from its cursor, once);
a host whose journal cannot be streamed falls back to polling and says why."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import pytest

from fleet_lab.fleet import prepare
from fleet_lab.lab import Lab, LabError, LabHost, check_root
from supervisor.config.supervised import Host
from supervisor.core.backoff import Backoff
from supervisor.core.streamstatus import StreamPhase
from supervisor.hear.streams.events import EventKind, UnitEvent
from supervisor.hear.streams.local import LocalTransport
from supervisor.hear.streams.protocol import Follow, Ran, Transport
from supervisor.hear.streams.ssh import SshTransport
from supervisor.hear.streams.stream import HostStream, StreamSettings

pytestmark = pytest.mark.slow

NAME = "evlab1"
ADDRESS = "127.0.0.71"
UNIT = "ev-die.service"
DIE = "/run/ev-die"
DYING = "RuntimeError: Engine core died unexpectedly"
UNITS = {
    UNIT: (
        "[Unit]\nDescription=dies on demand\nStartLimitIntervalSec=0\n\n[Service]\n"
        f"ExecStart=/bin/sh -c 'echo serving; while [ ! -e {DIE} ]; do sleep 0.05; done; "
        f'rm -f {DIE}; echo "{DYING}" >&2; exit 3\'\n'
    ),
}
WITHIN_S = 10.0


@pytest.fixture(scope="module")
def evlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    try:
        check_root()
    except LabError as exc:
        pytest.skip(str(exc))
    lab = Lab.create(tmp_path_factory.mktemp("evlab"), {NAME: ADDRESS}, {NAME: UNITS}, {NAME: []})
    lab.up()
    try:
        prepare(lab)  # a fresh box's shell start-up, its name in /etc/hosts
        yield lab
    finally:
        lab.down()


def run(host: LabHost, *argv: str) -> str:
    result = host.nsenter(*argv)
    assert result.returncode == 0, result.stderr
    return result.stdout


def ssh(lab: Lab) -> Transport:
    return SshTransport(lab.fleet_host(NAME))


def local(lab: Lab) -> Transport:
    pid = lab.host(NAME).pid
    assert pid is not None
    prefix = ("nsenter", "-t", str(pid), "-m", "-p", "-u", "-i")
    return LocalTransport(Host(name=NAME, local=True), prefix=prefix)


class Watch:
    """A stream of the unit on a transport, its events in a queue."""

    def __init__(self, transport: Transport, settings: StreamSettings | None = None) -> None:
        self.queue: asyncio.Queue[UnitEvent] = asyncio.Queue()
        self.seen: list[UnitEvent] = []
        self.stream = HostStream(
            NAME, (UNIT,), transport, self._deliver, settings=settings or StreamSettings()
        )
        self.task = asyncio.create_task(self.stream.run())

    def _deliver(self, event: UnitEvent) -> None:
        self.seen.append(event)
        self.queue.put_nowait(event)

    async def until(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WITHIN_S
        while not check():
            assert time.monotonic() < deadline, (
                f"no {what} within {WITHIN_S}s: {self.stream.status}"
            )
            await asyncio.sleep(0.02)

    async def next(self, kind: EventKind) -> UnitEvent:
        async with asyncio.timeout(WITHIN_S):
            while (event := await self.queue.get()).kind is not kind:
                pass
        return event

    async def close(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task
        await self.stream.close()


@pytest.fixture
async def clean(evlab: Lab) -> AsyncIterator[LabHost]:
    host = evlab.host(NAME)
    host.systemctl("stop", UNIT)
    host.systemctl("reset-failed", UNIT)
    yield host
    host.systemctl("stop", UNIT)


@pytest.mark.parametrize("transport", [ssh, local], ids=["ssh", "local"])
async def test_a_unit_that_dies_is_an_event_within_a_second_with_its_lines(
    evlab: Lab, clean: LabHost, transport: Callable[[Lab], Transport]
) -> None:
    watch = Watch(transport(evlab))
    try:
        await watch.until(lambda: watch.stream.status.text == "streaming", "stream")
        run(clean, "systemctl", "start", UNIT)
        started = await watch.next(EventKind.STARTED)
        assert started.message == f"Started {UNIT} - dies on demand."
        began = time.monotonic()
        run(clean, "touch", DIE)
        failed = await watch.next(EventKind.FAILED)
        took = time.monotonic() - began
    finally:
        await watch.close()
    await _until_no_journalctl(clean)
    print(f"death to event ({transport.__name__}): {took:.3f}s")
    assert took < 1.0
    assert (failed.host, failed.unit, failed.message) == (
        NAME,
        UNIT,
        f"{UNIT}: Failed with result 'exit-code'.",
    )
    state = (failed.active_state, failed.sub_state, failed.result, failed.exit_code)
    assert state == ("failed", "failed", "exit-code", "exited")
    assert (failed.exit_status, failed.n_restarts, failed.confirmed) == (3, 0, True)
    assert {DYING, "serving", f"Started {UNIT} - dies on demand."} <= set(failed.lines)
    assert failed.lines[-2:] == (
        f"{UNIT}: Main process exited, code=exited, status=3/NOTIMPLEMENTED",
        f"{UNIT}: Failed with result 'exit-code'.",
    )
    assert watch.stream.cursor == failed.cursor
    assert failed.summary() == f"{UNIT} failed: status=3 (exit-code)"


async def _until_no_journalctl(host: LabHost) -> None:
    """A closed stream leaves no journalctl behind on the host."""
    deadline = time.monotonic() + WITHIN_S
    while left := host.nsenter("ps", "-o", "pid=", "-C", "journalctl").stdout.split():
        assert time.monotonic() < deadline, f"journalctl still running: {left}"
        await asyncio.sleep(0.05)


def _sessions(host: LabHost) -> list[str]:
    """The sshd processes serving connections (every sshd but the listener), by PID."""
    listener = run(host, "systemctl", "show", "--value", "-p", "MainPID", "lab-sshd.service")
    sshd = run(host, "ps", "-o", "pid=", "-C", "sshd").split()
    return [pid for pid in sshd if pid != listener.strip()]


async def test_killing_the_ssh_session_mid_stream_loses_no_event(
    evlab: Lab, clean: LabHost
) -> None:
    settings = StreamSettings(backoff=Backoff(base_s=2.0, cap_s=2.0, jitter=0.0))
    watch = Watch(ssh(evlab), settings)
    try:
        await watch.until(lambda: watch.stream.status.text == "streaming", "stream")
        run(clean, "systemctl", "start", UNIT)
        await watch.next(EventKind.STARTED)
        cursor = watch.stream.cursor
        sessions = _sessions(clean)
        assert sessions
        run(clean, "kill", "-KILL", *sessions)
        await watch.until(
            lambda: watch.stream.status.phase is StreamPhase.RECONNECTING, "reconnect"
        )
        assert watch.stream.status.text == "reconnecting (attempt 1, next in 2.0s)"
        run(clean, "touch", DIE)
        await watch.until(lambda: clean.state(UNIT) == "failed/failed", "death")
        assert watch.stream.sessions == 1  # it died while nothing was streaming
        failed = await watch.next(EventKind.FAILED)
        await asyncio.sleep(1.0)  # anything delivered twice would be here by now
    finally:
        await watch.close()
    await _until_no_journalctl(clean)  # the cut session's journalctl did not linger either
    assert watch.stream.sessions == 2
    assert watch.stream.status.text == "streaming"
    assert [event.kind for event in watch.seen] == [EventKind.STARTED, EventKind.FAILED]
    assert failed.cursor != cursor
    assert DYING in failed.lines
    assert (failed.exit_status, failed.confirmed, failed.active_state) == (3, True, "failed")


class StartsBetween:
    """A transport that starts the unit between the stream's two commands, once: after the
    journal's newest cursor was read and before the follow from it, and waits until the start
    is in the journal. An entry about the unit then directly follows the cursor's entry, which
    is not about it."""

    def __init__(self, inner: Transport, host: LabHost) -> None:
        self.inner = inner
        self.host = host
        self.started = False

    async def run(self, argv: Sequence[str], *, timeout: float, sudo: bool = False) -> Ran:
        return await self.inner.run(argv, timeout=timeout, sudo=sudo)

    async def follow(self, argv: Sequence[str], *, sudo: bool = False) -> Follow:
        if not self.started:
            self.started = True
            run(self.host, "systemctl", "start", UNIT)
            shown = ("journalctl", "--no-pager", "--quiet", "--output=cat", f"--unit={UNIT}")
            deadline = time.monotonic() + WITHIN_S
            while f"Started {UNIT}" not in run(self.host, *shown):
                assert time.monotonic() < deadline, f"no start in the journal within {WITHIN_S}s"
                await asyncio.sleep(0.05)
        return await self.inner.follow(argv, sudo=sudo)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_start_between_the_cursor_and_the_follow_is_an_event(
    evlab: Lab, clean: LabHost
) -> None:
    """The first follow starts at the whole journal's newest entry, which is not about the
    unit: the unit's first entry after it is still delivered (`--after-cursor` skipped it)."""
    watch = Watch(StartsBetween(ssh(evlab), clean))
    try:
        started = await watch.next(EventKind.STARTED)
    finally:
        await watch.close()
    assert started.message == f"Started {UNIT} - dies on demand."
    assert watch.stream.sessions == 1


POLLING = StreamSettings(poll_every_s=0.2, retry_stream_every_s=60.0)


class Shows:
    """A transport that counts the `systemctl show` reads it has answered (the poller's reads of
    the units' state), so that a spec can wait for the first one instead of for a time."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.answered = 0

    async def run(self, argv: Sequence[str], *, timeout: float, sudo: bool = False) -> Ran:
        ran = await self.inner.run(argv, timeout=timeout, sudo=sudo)
        if list(argv[:2]) == ["systemctl", "show"] and ran.ok:
            self.answered += 1
        return ran

    async def follow(self, argv: Sequence[str], *, sudo: bool = False) -> Follow:
        return await self.inner.follow(argv, sudo=sudo)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_host_without_journalctl_is_polled_and_says_why(evlab: Lab, clean: LabHost) -> None:
    run(clean, "mv", "/usr/bin/journalctl", "/usr/bin/journalctl.hidden")
    shows = Shows(ssh(evlab))
    watch = Watch(shows, POLLING)
    try:
        reason = "polling: journalctl failed: bash: line 1: journalctl: command not found"
        await watch.until(lambda: watch.stream.status.text == reason, "polling")
        # the poller's first read of the units' state (what a change is measured against)
        read = shows.answered
        await watch.until(lambda: shows.answered > read, "first read of the units")
        run(clean, "systemctl", "start", UNIT)
        started = await watch.next(EventKind.STARTED)
        run(clean, "touch", DIE)
        failed = await watch.next(EventKind.FAILED)
    finally:
        await watch.close()
        run(clean, "mv", "/usr/bin/journalctl.hidden", "/usr/bin/journalctl")
    assert (started.source, started.message) == (
        "poll",
        f"{UNIT}: inactive/dead -> active/running, Result=success",
    )
    assert (failed.source, failed.message, failed.lines) == (
        "poll",
        f"{UNIT}: active/running -> failed/failed, Result=exit-code",
        (),
    )
    assert (failed.exit_code, failed.exit_status, failed.result) == ("exited", 3, "exit-code")


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("usermod -L watcher", "polling: authentication failed for watcher@evlab1 (127.0.0.71:22)"),
        ("usermod -p '*' watcher", "polling: journalctl failed: sudo: a password is required"),
    ],
    ids=["login-refused", "no-sudo"],
)
async def test_a_login_without_the_journal_is_polled_and_says_why(
    evlab: Lab, clean: LabHost, setup: str, reason: str
) -> None:
    run(clean, "sh", "-c", f"id watcher >/dev/null 2>&1 || useradd -m watcher; {setup}")
    host = evlab.fleet_host(NAME).model_copy(update={"user": "watcher"})
    watch = Watch(SshTransport(host), POLLING)
    try:
        await watch.until(lambda: watch.stream.status.text == reason, "polling")
    finally:
        await watch.close()
    assert watch.stream.sessions == 0
    assert watch.seen == []


async def test_a_cursor_the_journal_refuses_is_dropped_for_the_newest_entry(
    evlab: Lab, clean: LabHost
) -> None:
    settings = StreamSettings(backoff=Backoff(base_s=0.1, cap_s=0.1, jitter=0.0))
    watch = Watch(ssh(evlab), settings)
    watch.stream.cursor = "s=not-a-cursor"
    try:
        await watch.until(lambda: watch.stream.sessions == 2, "second session")
        await watch.until(lambda: watch.stream.status.text == "streaming", "stream")
        run(clean, "systemctl", "start", UNIT)
        started = await watch.next(EventKind.STARTED)
    finally:
        await watch.close()
    assert watch.stream.cursor not in (None, "s=not-a-cursor")
    assert started.message == f"Started {UNIT} - dies on demand."
    assert [event.kind for event in watch.seen] == [EventKind.STARTED]
