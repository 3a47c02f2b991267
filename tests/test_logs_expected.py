"""A deposed leader's refused write (`StaleEpochError`) is an expected end, not a crash: logged
from wherever it surfaces (`log.exception` in a worker, a job), it is one warning line naming
the refusal, without traceback. Any other error keeps its traceback. The daemon's real log
set-up (`supervisor.core.logs.configure`), JSON lines on a real stream."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from telegram.error import Conflict, TimedOut

from supervisor.core import logs
from supervisor.record.store.errors import StoreRefusedError
from supervisor.record.store.lease import StaleEpochError
from supervisor.tell.telegram.request import DeposedError, polling_failed


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    logs.configure(json=True)
    yield out
    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logs.StdlibBridge)]:
        root.removeHandler(handler)


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


STALE = StaleEpochError(mine=1, current=2, holder="b", what="message opened #4 to 1001")
GONE = StoreRefusedError(
    "cannot write to store postgresql+asyncpg://fleet@db/fleet: connection is closed"
)


@pytest.mark.parametrize(
    ("error", "level", "refused", "said", "traceback"),
    [
        (
            STALE,
            "warning",
            "refused under stale epoch 1: b leads with epoch 2 (message opened #4 to 1001)",
            None,
            False,
        ),
        (  # a store error is its one sentence (a woken leader whose session the server ended)
            GONE,
            "error",
            None,
            "cannot write to store postgresql+asyncpg://fleet@db/fleet: connection is closed",
            False,
        ),
        (RuntimeError("boom"), "error", None, None, True),
    ],
)
def test_an_expected_end_is_one_warning_line_and_a_crash_keeps_its_traceback(
    stream: io.StringIO,
    error: Exception,
    level: str,
    refused: str | None,
    said: str | None,
    traceback: bool,
) -> None:
    log = structlog.get_logger("supervisor.test")
    try:
        raise error
    except Exception:
        log.exception("event failed", item="ProbeTick")
    [line] = _lines(stream)
    assert (line["event"], line["level"], line.get("refused")) == ("event failed", level, refused)
    assert line.get("error") == said
    assert ("exception" in line) is traceback
    assert ("Traceback" in stream.getvalue()) is traceback


def test_an_expected_end_passed_as_exc_info_is_quiet_too(stream: io.StringIO) -> None:
    structlog.get_logger("supervisor.test").error("command failed", exc_info=STALE)
    [line] = _lines(stream)
    assert line == {
        "event": "command failed",
        "level": "warning",
        "timestamp": line["timestamp"],
        "refused": str(STALE),
    }


def test_a_library_logs_json_through_the_same_pipeline(stream: io.StringIO) -> None:
    """python-telegram-bot (any library on `logging`) writes one JSON line, not raw text."""
    try:
        raise Conflict("Conflict: terminated by other getUpdates request")
    except Conflict as exc:
        logging.getLogger("telegram.ext.Updater").error("polling failed", exc_info=exc)
    logging.getLogger("telegram.ext.Updater").info("below warning: not written")
    [line] = _lines(stream)
    assert (line["event"], line["level"], line["logger"]) == (
        "polling failed",
        "error",
        "telegram.ext.Updater",
    )
    assert "Conflict: terminated by other getUpdates request" in line["exception"]


def test_the_pollers_last_call_failing_at_shutdown_is_one_warning_line(
    stream: io.StringIO,
) -> None:
    """python-telegram-bot's last getUpdates at shutdown, the Bot API unreachable: its
    exception is the whole story (no traceback)."""
    try:
        raise TimedOut("Pool timeout: All connections in the connection pool are occupied.")
    except TimedOut:
        logging.getLogger("telegram.ext.Updater").exception(
            "Error while calling `get_updates` one more time to mark all fetched updates. "
            "Suppressing error to ensure graceful shutdown."
        )
    [line] = _lines(stream)
    assert (line["level"], line["logger"], line["error"]) == (
        "warning",
        "telegram.ext.Updater",
        "Pool timeout: All connections in the connection pool are occupied.",
    )
    assert "exception" not in line


def test_a_silenced_command_writes_no_line_of_a_library_either(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The demo's narration is its output: a library's error (which Python's last-resort
    handler would print, traceback and all) is not written."""
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # as in a command (not pytest's)
    logs.silence()
    try:
        try:
            raise TimedOut("Pool timeout")
        except TimedOut:
            logging.getLogger("telegram.ext.Updater").exception("cleanup failed")
        structlog.get_logger("supervisor.test").warning("ours")
    finally:
        structlog.reset_defaults()
    assert out.getvalue() == ""


def test_a_refused_bot_api_call_of_a_deposed_leader_is_not_said_twice(
    stream: io.StringIO,
) -> None:
    deposed = DeposedError("getUpdates not sent: this instance no longer leads")
    logging.getLogger("telegram.ext.Updater").error("cleanup failed", exc_info=deposed)
    polling_failed(deposed)
    assert _lines(stream) == []


def test_a_conflict_is_one_warning_that_says_what_it_means(stream: io.StringIO) -> None:
    polling_failed(Conflict("Conflict: terminated by other getUpdates request"))
    [line] = _lines(stream)
    assert (line["event"], line["level"]) == (
        "telegram: another instance polls with this bot's token",
        "warning",
    )
    assert line["meaning"].startswith("the Bot API lets one consumer poll a token")
    assert "exception" not in line


def _never_retrieved(error: BaseException) -> None:
    """What asyncio says of a future whose exception nobody read (its default handler)."""
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        future.set_exception(error)
        del future
        gc.collect()
    finally:
        loop.close()


def test_an_unread_exception_is_an_error_line(stream: io.StringIO) -> None:
    """asyncio's word for a future whose exception nobody read stays an error, asyncpg's TLS
    probe's included: an attempt given up mid-question no longer leaves one
    (`supervisor.record.store.pgengine.mend_tls_probe`), so one seen is a leak to fix."""
    _never_retrieved(ConnectionError("unexpected connection_lost() call"))
    _never_retrieved(ConnectionError("something else"))
    said = [(e["logger"], e["level"], e["exception"]) for e in _lines(stream)]
    assert said == [
        ("asyncio", "error", "ConnectionError: unexpected connection_lost() call"),
        ("asyncio", "error", "ConnectionError: something else"),
    ]
