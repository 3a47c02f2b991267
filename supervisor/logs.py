"""structlog set-up: JSON lines when stderr is not a terminal, readable text when it is.

Every endpoint event carries `endpoint` (and `incident` when one is open): the worker binds them.
"""

from __future__ import annotations

import logging
import sys
from typing import NoReturn

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
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def _drop(_logger: object, _name: str, _event: object) -> NoReturn:
    raise structlog.DropEvent


def silence() -> None:
    """For commands whose output is the answer (the demo's narration): no log lines, and no
    warning of APScheduler's on stderr when a busy machine makes it skip a tick."""
    structlog.configure(processors=[_drop], logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
