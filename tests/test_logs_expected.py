"""A deposed leader's refused write (`StaleEpochError`) is an expected end, not a crash: logged
from wherever it surfaces (`log.exception` in a worker, a job), it is one warning line naming
the refusal, without traceback. Any other error keeps its traceback. The daemon's real log
set-up (`supervisor.core.logs.configure`), JSON lines on a real stream."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from supervisor.core import logs
from supervisor.record.store import StoreRefusedError
from supervisor.record.store.lease import StaleEpochError


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    logs.configure(json=True)
    yield out
    structlog.reset_defaults()


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
