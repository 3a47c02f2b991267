"""Host events: journald JSON recorded from real systemd 252 (tests/data/hostevents/) read into
unit events; malformed lines; what polling makes of two `systemctl show` reads."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Host
from supervisor.core.backoff import Backoff
from supervisor.core.streamstatus import CONNECTING, STREAMING, StreamPhase
from supervisor.hear.streams.events import EventKind, UnitEvent
from supervisor.hear.streams.hub import HostEvents, units_by_host
from supervisor.hear.streams.journal import follow_argv, head_cursor, parse_entry
from supervisor.hear.streams.local import LocalTransport
from supervisor.hear.streams.poll import PolledUnit, changes, parse_show
from supervisor.hear.streams.recognise import Recognised, Recogniser
from supervisor.hear.streams.ssh import SshTransport
from supervisor.hear.streams.stream import HostStream, StreamSettings
from tests.ports import free_port

DATA = Path(__file__).parent / "data" / "hostevents"

Row = tuple[str, str, int | None, int | None]  # kind, result, exit status, restart counter


def recognise(name: str) -> list[Recognised]:
    recogniser = Recogniser((f"{name}.service",))
    found = []
    for line in (DATA / f"{name}.jsonl").read_bytes().splitlines():
        entry = parse_entry(line)
        assert entry is not None
        if (event := recogniser.feed(entry)) is not None:
            found.append(event)
    return found


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        (
            "ev-127",  # exit 127 with restarts (RestartSec=1), then `systemctl stop`
            [
                ("started", "", None, None),
                ("failed", "exit-code", 127, None),
                ("started", "", None, 1),
                ("failed", "exit-code", 127, 1),
                ("started", "", None, 2),
                ("crash_loop", "exit-code", 127, 2),
                ("started", "", None, 3),
                ("stopped", "", None, 0),
            ],
        ),
        (
            "ev-203",  # a missing binary: 203/EXEC, restarts, stopped while waiting to restart
            [
                ("started", "", None, None),
                ("failed", "exit-code", 203, None),
                ("started", "", None, 1),
                ("failed", "exit-code", 203, 1),
                ("started", "", None, 2),
                ("crash_loop", "exit-code", 203, 2),
                ("stopped", "", None, 0),
            ],
        ),
        ("ev-clean", [("started", "", None, None), ("exited", "success", None, None)]),
        (
            "ev-long",  # start, stop; start, SIGKILL, automatic restart, stop
            [
                ("started", "", None, None),
                ("stopped", "", None, 0),
                ("started", "", None, 0),
                ("failed", "signal", 9, 0),
                ("started", "", None, 1),
                ("stopped", "", None, 0),
            ],
        ),
        (
            "ev-loop",  # exit 1 in a loop until the start limit (StartLimitBurst=3)
            [
                ("started", "", None, None),
                ("failed", "exit-code", 1, None),
                ("started", "", None, 1),
                ("failed", "exit-code", 1, 1),
                ("started", "", None, 2),
                ("crash_loop", "exit-code", 1, 2),
                ("crash_loop", "start-limit-hit", None, 3),
            ],
        ),
    ],
)
def test_recorded_journals_make_these_events(name: str, rows: list[Row]) -> None:
    found = [(e.kind.value, e.result, e.exit_status, e.n_restarts) for e in recognise(name)]
    assert found == rows


def test_a_death_carries_the_units_own_lines_and_systemds() -> None:
    failed = recognise("ev-127")[1]
    assert failed.message == "ev-127.service: Failed with result 'exit-code'."
    assert failed.exit_code == "exited"
    assert failed.lines == (
        "Started ev-127.service - exit 127.",
        "/bin/bash: /opt/missing/vllm-090.sh: No such file or directory",
        "ev-127.service: Main process exited, code=exited, status=127/n/a",
        "ev-127.service: Failed with result 'exit-code'.",
    )
    exec_failed = recognise("ev-203")[3]
    assert exec_failed.lines[-5:] == (
        "Started ev-203.service - exec 203.",
        "ev-203.service: Failed to locate executable /opt/vllm-090/bin/vllm: "
        "No such file or directory",
        "ev-203.service: Failed at step EXEC spawning /opt/vllm-090/bin/vllm: "
        "No such file or directory",
        "ev-203.service: Main process exited, code=exited, status=203/EXEC",
        "ev-203.service: Failed with result 'exit-code'.",
    )


def test_a_clean_exit_is_not_a_stop_and_a_stop_is_not_an_exit() -> None:
    exited = recognise("ev-clean")[1]
    assert (exited.message, exited.lines) == (
        "ev-clean.service: Deactivated successfully.",
        (
            "engine core died",
            "Started ev-clean.service - clean exit.",
            "ev-clean.service: Deactivated successfully.",
        ),
    )
    stopped = recognise("ev-long")[1]
    assert stopped.message == "Stopped ev-long.service - long running."
    assert stopped.lines[-3:] == (
        "Stopping ev-long.service - long running...",
        "ev-long.service: Deactivated successfully.",
        "Stopped ev-long.service - long running.",
    )


def test_the_start_limit_is_a_crash_loop_whatever_the_counter() -> None:
    limit = recognise("ev-loop")[-1]
    assert limit.lines == (
        "ev-loop.service: Scheduled restart job, restart counter is at 3.",
        "Stopped ev-loop.service - start limit.",
        "ev-loop.service: Start request repeated too quickly.",
        "ev-loop.service: Failed with result 'exit-code'.",
    )


def test_without_message_ids_the_texts_are_recognised() -> None:
    """An older systemd does not tag these messages: the same events come from the texts."""
    recogniser = Recogniser(("ev-127.service",))
    kinds = []
    for line in (DATA / "ev-127.jsonl").read_text().splitlines():
        untagged = line.replace('"MESSAGE_ID":', '"OTHER_ID":')
        untagged = untagged.replace('"N_RESTARTS":', '"N_X":').replace('"EXIT_STATUS":', '"E_X":')
        untagged = untagged.replace('"UNIT_RESULT":', '"U_X":').replace('"EXIT_CODE":', '"C_X":')
        entry = parse_entry(untagged)
        assert entry is not None
        if (event := recogniser.feed(entry)) is not None:
            kinds.append((event.kind.value, event.result, event.exit_status, event.n_restarts))
    assert kinds == [
        ("started", "", None, None),
        ("failed", "exit-code", 127, None),
        ("started", "", None, 1),
        ("failed", "exit-code", 127, 1),
        ("started", "", None, 2),
        ("crash_loop", "exit-code", 127, 2),
        ("started", "", None, 3),
        ("stopped", "", None, 0),
    ]


def test_lines_of_other_units_and_of_plain_programs_make_no_event() -> None:
    recogniser = Recogniser(("a.service",))
    line = (DATA / "ev-clean.jsonl").read_text().splitlines()[2]  # Deactivated successfully
    entry = parse_entry(line)
    assert entry is not None
    assert recogniser.feed(entry) is None  # about ev-clean.service, not watched
    mimic = (
        '{"MESSAGE":"a.service: Deactivated successfully.","_PID":"7","_SYSTEMD_UNIT":"a.service",'
        + CURSOR
        + ","
        + WHEN
        + "}"
    )
    own = parse_entry(mimic)
    assert own is not None
    assert (own.unit, own.from_systemd) == ("a.service", False)
    assert recogniser.feed(own) is None  # the unit's program printing systemd's words


CURSOR = '"__CURSOR":"s=1;i=2"'
WHEN = '"__REALTIME_TIMESTAMP":"1795590955551314"'


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"MESSAGE":"x","__REALTIME_TIMESTAMP":"1795590955551314"}',  # no cursor
        ('{"MESSAGE":"x",' + CURSOR + "}").encode(),  # no timestamp
        ('{"MESSAGE":"x",' + CURSOR + ',"__REALTIME_TIMESTAMP":"soon"}').encode(),
        ('{"MESSAGE":{"a":1},' + CURSOR + "," + WHEN + "}").encode(),
        b"\xff\xfe{",
    ],
)
def test_malformed_lines_are_none(line: bytes) -> None:
    assert parse_entry(line) is None


def test_binary_and_null_messages_are_read() -> None:
    binary = parse_entry('{"MESSAGE":[104,105,255],' + CURSOR + "," + WHEN + "}")
    null = parse_entry('{"MESSAGE":null,' + CURSOR + "," + WHEN + "}")
    assert binary is not None
    assert null is not None
    assert (binary.message, null.message) == ("hi\ufffd", "")
    assert binary.at == datetime(2026, 11, 25, 7, 15, 55, 551314, tzinfo=UTC)


def test_the_follow_command_and_the_head_cursor() -> None:
    assert follow_argv(("a.service", "b.service"), "s=1;i=2") == [
        "journalctl",
        "--follow",
        "--no-pager",
        "--quiet",
        "--output=json",
        "--output-fields=MESSAGE,MESSAGE_ID,UNIT,_SYSTEMD_UNIT,_PID,SYSLOG_IDENTIFIER,JOB_TYPE,"
        "JOB_RESULT,EXIT_CODE,EXIT_STATUS,UNIT_RESULT,N_RESTARTS",
        "--cursor=s=1;i=2",
        "--unit=a.service",
        "--unit=b.service",
    ]
    head = '{"__CURSOR":"s=9d;i=b","__REALTIME_TIMESTAMP":"1795590949842285"}\n'
    assert head_cursor(head) == "s=9d;i=b"
    assert head_cursor("") is None


SHOW = """Id=a.service
ActiveState={a}
SubState={sa}
Result={ra}
ExecMainCode={ca}
ExecMainStatus={xa}
NRestarts={na}
"""


def _show(active: str, sub: str, result: str, code: str, status: str, restarts: str) -> str:
    return SHOW.format(a=active, sa=sub, ra=result, ca=code, xa=status, na=restarts)


@pytest.mark.parametrize(
    ("before", "after", "kind", "message"),
    [
        (
            ("active", "running", "success", "0", "0", "0"),
            ("activating", "auto-restart", "exit-code", "1", "127", "1"),
            "failed",
            "a.service: active/running -> activating/auto-restart, Result=exit-code, "
            "NRestarts 0 -> 1",
        ),
        (
            ("activating", "auto-restart", "exit-code", "1", "127", "1"),
            ("activating", "auto-restart", "exit-code", "1", "127", "4"),
            "crash_loop",
            "a.service: activating/auto-restart -> activating/auto-restart, Result=exit-code, "
            "NRestarts 1 -> 4",
        ),
        (
            ("active", "running", "success", "0", "0", "0"),
            ("failed", "failed", "signal", "2", "9", "0"),
            "failed",
            "a.service: active/running -> failed/failed, Result=signal",
        ),
        (
            ("active", "running", "success", "0", "0", "0"),
            ("inactive", "dead", "success", "1", "0", "0"),
            "exited",
            "a.service: active/running -> inactive/dead, Result=success",
        ),
        (
            ("inactive", "dead", "success", "1", "0", "0"),
            ("active", "running", "success", "0", "0", "0"),
            "started",
            "a.service: inactive/dead -> active/running, Result=success",
        ),
        (
            ("active", "running", "success", "0", "0", "0"),
            ("active", "running", "success", "0", "0", "0"),
            "",
            "",
        ),
    ],
)
def test_polling_turns_two_reads_into_these_events(
    before: tuple[str, ...], after: tuple[str, ...], kind: str, message: str
) -> None:
    found = changes(parse_show(_show(*before)), parse_show(_show(*after)), crash_after=3)
    assert [(c.kind.value, c.message) for c in found] == ([(kind, message)] if kind else [])


def test_show_output_of_two_units_and_a_killed_process() -> None:
    text = (
        _show("failed", "failed", "signal", "2", "9", "0")
        + "\n"
        + "Id=b.service\nActiveState=active\n"
    )
    states = parse_show(text)
    assert states["a.service"] == PolledUnit(
        unit="a.service",
        active_state="failed",
        sub_state="failed",
        result="signal",
        exit_code="killed",
        exit_status=9,
        n_restarts=0,
    )
    assert states["b.service"].active_state == "active"


@pytest.mark.parametrize(
    ("fields", "summary"),
    [
        (
            {
                "kind": EventKind.FAILED,
                "result": "exit-code",
                "exit_code": "exited",
                "exit_status": 127,
                "n_restarts": 2,
            },
            "v.service failed: status=127, 2 restarts (exit-code)",
        ),
        (
            {
                "kind": EventKind.FAILED,
                "result": "signal",
                "exit_code": "killed",
                "exit_status": 9,
                "n_restarts": 1,
            },
            "v.service failed: signal 9, 1 restart (signal)",
        ),
        (
            {
                "kind": EventKind.EXITED,
                "result": "success",
                "exit_code": "exited",
                "exit_status": 0,
            },
            "v.service exited: status=0",
        ),
        ({"kind": EventKind.STARTED}, "v.service started"),
    ],
)
def test_event_summary(fields: dict[str, Any], summary: str) -> None:
    event = UnitEvent(
        host="h", unit="v.service", message="m", at=datetime.now(UTC), cursor="c", **fields
    )
    assert event.summary() == summary
    assert event.kind.down is (event.kind is not EventKind.STARTED)


def _scripted(tmp_path: Path, follows: list[list[str]], show: str) -> LocalTransport:
    for n, lines in enumerate(follows, start=1):
        (tmp_path / f"follow-{n}.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "show.txt").write_text(show)
    prefix = (sys.executable, str(DATA / "scripted_host.py"), str(tmp_path))
    return LocalTransport(Host(name="h1", local=True), prefix=prefix)


async def test_the_stream_skips_bad_lines_confirms_and_resumes_from_its_cursor(
    tmp_path: Path,
) -> None:
    recorded = (DATA / "ev-127.jsonl").read_text().splitlines()
    first = [recorded[0], "garbage", "[]", *recorded[1:4], "EXIT"]  # started, bash, exited, failed
    # `--cursor` prints the entry at the cursor (the `failed`, delivered) first, then the
    # restart scheduled and the restart's `Stopped`
    second = recorded[3:6]
    show = _show("activating", "auto-restart", "exit-code", "1", "127", "1")
    transport = _scripted(tmp_path, [first, second], show.replace("a.service", "ev-127.service"))
    settings = StreamSettings(backoff=Backoff(base_s=0.05, cap_s=0.05, jitter=0))
    seen: list[UnitEvent] = []
    stream = HostStream("h1", ("ev-127.service",), transport, seen.append, settings=settings)
    task = asyncio.create_task(stream.run())
    try:
        for _ in range(500):  # 10 s
            if stream.sessions == 2 and stream.cursor == parse_cursor(recorded[5]):
                break
            await asyncio.sleep(0.02)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert stream.skipped == 2
    assert [(e.kind.value, e.confirmed, e.active_state, e.n_restarts) for e in seen] == [
        ("started", False, "", None),
        ("failed", True, "activating", 1),
    ]
    follows = [
        line.split("--cursor=")[1].split(" ")[0]
        for line in (tmp_path / "argv.log").read_text().splitlines()
        if "--follow" in line
    ]
    assert follows == ["s=head;i=1", parse_cursor(recorded[3])]


def parse_cursor(line: str) -> str:
    entry = parse_entry(line)
    assert entry is not None
    return entry.cursor


def test_units_by_host_reads_the_config(tmp_path: Path) -> None:
    config = FleetConfig.model_validate(
        {
            "source": tmp_path / "fleet.yaml",
            "hosts": {
                "s1": {"name": "s1", "address": "10.0.0.1"},
                "mac": {"name": "mac", "address": "10.0.0.2", "service_manager": "launchd"},
            },
            "endpoints": {
                name: {
                    "name": name,
                    "kind": "health",
                    "url": "http://10.0.0.1:8000/health",
                    "units": [{"host": host, "unit": unit} for host, unit in units],
                }
                for name, units in {
                    "a": [("s1", "head.service"), ("s1", "worker.service")],
                    "b": [("s1", "head.service"), ("mac", "ollama")],
                }.items()
            },
        }
    )
    assert units_by_host(config) == {"s1": ("head.service", "worker.service")}


async def test_host_events_runs_a_stream_per_host_and_reports_status_and_cursors(
    tmp_path: Path,
) -> None:
    recorded = (DATA / "ev-clean.jsonl").read_text().splitlines()
    show = _show("inactive", "dead", "success", "1", "0", "0").replace(
        "a.service", "ev-clean.service"
    )
    config = FleetConfig.model_validate(
        {
            "source": tmp_path / "fleet.yaml",
            "hosts": {"s1": {"name": "s1", "address": "10.0.0.1"}},
            "endpoints": {
                "e": {
                    "name": "e",
                    "kind": "health",
                    "url": "http://10.0.0.1:8000/health",
                    "units": [{"host": "s1", "unit": "ev-clean.service"}],
                }
            },
        }
    )
    seen: list[UnitEvent] = []
    events = HostEvents(
        config, seen.append, transports={"s1": _scripted(tmp_path, [recorded], show)}
    )
    assert events.status() == {"s1": CONNECTING}
    assert events.cursors() == {}
    task = asyncio.create_task(events.run())
    try:
        for _ in range(500):  # 10 s
            if events.cursors().get("s1") == parse_cursor(recorded[-1]):
                break
            await asyncio.sleep(0.02)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert events.status() == {"s1": STREAMING}
    assert [(e.host, e.kind.value, e.summary()) for e in seen] == [
        ("s1", "started", "ev-clean.service started"),
        ("s1", "exited", "ev-clean.service exited: status=0"),
    ]


async def test_a_refused_host_backs_off_then_counts_as_polling(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there: every connection is refused at once
    host = Host(name="s9", address="127.0.0.1", port=port, check_host_key=False)
    settings = StreamSettings(backoff=Backoff(base_s=0.05, cap_s=0.2, jitter=0), poll_after=3)
    stream = HostStream(
        "s9", ("a.service",), SshTransport(host), list[UnitEvent]().append, settings=settings
    )
    statuses: list[str] = []
    task = asyncio.create_task(stream.run())
    try:
        for _ in range(500):  # 10 s
            if not statuses or statuses[-1] != stream.status.text:
                statuses.append(stream.status.text)
            if stream.status.phase is StreamPhase.POLLING:
                break
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await stream.close()
    assert statuses == [
        "connecting",
        "reconnecting (attempt 1, next in 0.1s)",
        "reconnecting (attempt 2, next in 0.1s)",
        f"polling: cannot connect to s9 (127.0.0.1:{port}): connection refused",
    ]
    assert stream.sessions == 0
