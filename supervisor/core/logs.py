"""structlog set-up: JSON lines when stderr is not a terminal, readable text when it is.

Every endpoint event carries `endpoint` (and `incident` when one is open): the worker binds them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
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
    """For commands whose output is the answer (the demo's narration): no log lines, and no
    warning of APScheduler's on stderr when a busy machine makes it skip a tick."""
    structlog.configure(processors=[_drop], logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
