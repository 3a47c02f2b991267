"""structlog set-up: JSON lines when stderr is not a terminal, readable text when it is.

Every endpoint event carries `endpoint` (and `incident` when one is open): the worker binds them.
What libraries log through the standard `logging` module (python-telegram-bot, APScheduler,
aiohttp, ...) goes through the same pipeline (`StdlibBridge`): one structured line each, its
logger's name as `logger`, warnings and worse only.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, NoReturn

import structlog


def configure(*, json: bool | None = None, level: str = "info") -> None:
    as_json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            expected_ends,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    bridge_stdlib()


@dataclass(frozen=True)
class KnownLine:
    """A library's line we know: its logger, how its message starts and, when it matters, its
    exception's text. Said at `level`; `plain`: the exception's text as `error`, no traceback."""

    logger: str
    starts: str
    exception: str | None = None
    level: str = "debug"
    plain: bool = False

    def matches(self, record: logging.LogRecord, exc: BaseException | None) -> bool:
        return (
            record.name == self.logger
            and str(record.msg).startswith(self.starts)
            and (self.exception is None or (exc is not None and str(exc) == self.exception))
        )


KNOWN_LINES: tuple[KnownLine, ...] = (
    # asyncpg's probe for TLS, of a connection attempt that was given up (its connect timeout,
    # on a loaded machine): the attempt's failure is reported by whoever connected (`store
    # refuses writes`); the probe's future, set when the socket closes, is read by nobody, and
    # asyncio says so at error level. Not a failure: a debug line.
    KnownLine(
        "asyncio", "Future exception was never retrieved", "unexpected connection_lost() call"
    ),
    # python-telegram-bot's last getUpdates at shutdown (it marks the updates it fetched as
    # read), when the Bot API cannot be reached then: the updates may come again at the next
    # start, which answers them as any other. Its exception says all there is.
    KnownLine(
        "telegram.ext.Updater",
        "Error while calling `get_updates` one more time",
        level="warning",
        plain=True,
    ),
)
"""The library lines we know (the first that matches a record decides)."""


class StdlibBridge(logging.Handler):
    """A `logging` handler that hands each record to structlog (so a library's line is JSON
    like ours). A record carrying an expected end (`expected_end`: a deposed leader's refused
    call, already said once by the part that refused it) is dropped; a known leftover of a
    library (`KNOWN_LINES`) is said at its level, plainly if so."""

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and getattr(exc, "expected_end", False):
            return
        known = next((k for k in KNOWN_LINES if k.matches(record, exc)), None)
        if known is not None:
            record.levelname = known.level.upper()
        logger = structlog.get_logger(record.name)
        fields: dict[str, Any] = {"logger": record.name}
        if exc is not None and known is not None and known.plain:
            fields["error"] = str(exc) or type(exc).__name__
        elif record.exc_info:
            fields["exc_info"] = record.exc_info
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        level = record.levelname.lower()
        emit = getattr(logger, level if level in _LEVELS else "warning")
        emit(message, **fields)


_LEVELS = frozenset({"debug", "info", "warning", "error", "critical"})


def bridge_stdlib(level: int = logging.WARNING) -> None:
    """Route the `logging` module's records (of every library) through structlog."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, StdlibBridge)]:
        root.removeHandler(old)
    root.addHandler(StdlibBridge())
    root.setLevel(level)


def expected_ends(
    _logger: object, _name: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """An error that is an expected end, not a crash (its class says `expected_end = True`: a
    deposed leader's refused write, `StaleEpochError`), logged from wherever it surfaces: a
    warning that names it (`refused`), without traceback. An error whose class says
    `plain = True` (`StoreError`: its message is one sentence naming the store and why) keeps
    its level and is that sentence (`error`), without traceback."""
    exc = event.get("exc_info")
    if exc is True:
        exc = sys.exc_info()[1]
    elif isinstance(exc, tuple):
        exc = exc[1]
    if isinstance(exc, BaseException) and getattr(exc, "expected_end", False):
        del event["exc_info"]
        event["level"] = "warning"
        event["refused"] = str(exc)
    elif isinstance(exc, BaseException) and getattr(exc, "plain", False):
        # an error whose message is the whole story (a `StoreError`): that line, no traceback
        del event["exc_info"]
        event["error"] = str(exc)
    return event


def _drop(_logger: object, _name: str, _event: object) -> NoReturn:
    raise structlog.DropEvent


def silence() -> None:
    """For commands whose output is the answer (the demo's narration): no log lines, ours or a
    library's (APScheduler's warning when a busy machine makes it skip a tick, say)."""
    structlog.configure(processors=[_drop], logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    bridge_stdlib()  # the libraries' lines too (Python's last-resort handler would print them)
