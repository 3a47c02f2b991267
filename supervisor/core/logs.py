"""structlog set-up: JSON lines when stderr is not a terminal, readable text when it is.

Every endpoint event carries `endpoint` (and `incident` when one is open): the worker binds them.
What libraries log through the standard `logging` module (python-telegram-bot, APScheduler,
aiohttp, ...) is formatted by structlog's `ProcessorFormatter` with the same processors and
renderer (`StdlibBridge`): one structured line each, its logger's name as `logger`, warnings and
worse only, the lines we know of a library (`KNOWN_LINES`) said as the table says.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, NoReturn

import structlog
from structlog.processors import NAME_TO_LEVEL
from structlog.stdlib import ProcessorFormatter


def configure(*, json: bool | None = None, level: str = "info") -> None:
    as_json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    threshold = logging.getLevelName(level.upper())
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamp,
            expected_ends,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    library = ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_logger_name,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            LibraryLines(threshold),
            stamp,
            expected_ends,
            structlog.processors.format_exc_info,
        ],
        processors=[ProcessorFormatter.remove_processors_meta, renderer],
    )
    bridge_stdlib(StdlibBridge(library))


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


@dataclass(frozen=True)
class LibraryLines:
    """The processor for a library's record (in `ProcessorFormatter`'s `foreign_pre_chain`, after
    `add_log_level`). A record carrying an expected end (`expected_end`: a deposed leader's
    refused call, already said once by the part that refused it) is dropped; a known line of a
    library (`known`) is said at its level, plainly if so; a line below `threshold` (the
    daemon's level) is dropped."""

    threshold: int
    known: tuple[KnownLine, ...] = KNOWN_LINES

    def __call__(
        self, _logger: object, _name: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        record: logging.LogRecord = event["_record"]
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and getattr(exc, "expected_end", False):
            raise structlog.DropEvent
        known = next((k for k in self.known if k.matches(record, exc)), None)
        if known is not None:
            event["level"] = known.level
            if exc is not None and known.plain:
                del event["exc_info"]
                event["error"] = str(exc) or type(exc).__name__
        if NAME_TO_LEVEL.get(event["level"], logging.WARNING) < self.threshold:
            raise structlog.DropEvent
        return event


class StdlibBridge(logging.Handler):
    """The root `logging` handler: its `ProcessorFormatter` renders a library's record as one of
    our lines, written through structlog's `PrintLogger` (the lock our own lines take); a record
    its chain drops (`structlog.DropEvent`) is not written."""

    def __init__(self, formatter: ProcessorFormatter) -> None:
        super().__init__()
        self.setFormatter(formatter)
        self._out = structlog.PrintLogger(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._out.msg(self.format(record))
        except structlog.DropEvent:
            return
        except Exception:  # logging's own rule: a handler's failure is reported, not raised
            self.handleError(record)


def bridge_stdlib(bridge: StdlibBridge, level: int = logging.WARNING) -> None:
    """Route the `logging` module's records (of every library) through `bridge`."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, StdlibBridge)]:
        root.removeHandler(old)
    root.addHandler(bridge)
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
    # the libraries' lines too (Python's last-resort handler would print them)
    bridge_stdlib(StdlibBridge(ProcessorFormatter(processors=[_drop])))
