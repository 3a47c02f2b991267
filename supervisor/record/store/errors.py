"""The one exception the store raises: a plain sentence, ready to show a person."""

from __future__ import annotations

import errno
import socket


class StoreError(Exception):
    """The store cannot do what was asked; the message says why in one line, e.g.

    ``no store at /x/state/supervisor.db (has the daemon run yet?)``,
    ``cannot open store /x: unable to open database file``,
    ``store /x is not a fleet-supervisor database (user_version 0)``, ``no incident 42``.

    Logged from wherever it surfaces, it is that line (`error`), not a traceback
    (`supervisor.core.logs`): the sentence says all there is to say.
    """

    plain = True


class StoreRefusedError(StoreError):
    """The file itself refused (locked by another process, read-only, disk full), or the
    database server did (down, unreachable): worth a retry, unlike e.g. ``no incident 42``.
    `cause`, when the driver's error said it by its type (`server_unreachable`), is the few
    words for people (`unwritable_cause`)."""

    def __init__(self, message: str, *, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


SERVER_DOWN = "the database server is down or unreachable"

_UNREACHABLE_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ENOTCONN,
        errno.ESHUTDOWN,
        errno.ETIMEDOUT,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.ENETRESET,
        errno.EHOSTDOWN,
        errno.EHOSTUNREACH,
        errno.EADDRNOTAVAIL,
    }
)
_UNREACHABLE_SQLSTATES = ("08", "57P01", "57P02", "57P03")
"""SQLSTATE class 08 (connection exception: e.g. 08003, asyncpg's "connection was closed in the
middle of operation"), 57P01 admin shutdown (`pg_ctl stop -m fast` ends each session), 57P02
crash shutdown, 57P03 cannot connect now (the server shutting down or starting up)."""


def server_unreachable(err: BaseException) -> bool:
    """Whether a driver's error means the database server is down or unreachable, by its type
    rather than its words: a `ConnectionError` (refused, reset, aborted, a broken pipe; asyncpg's
    "unexpected connection_lost() call"), a timeout, a failed name lookup, an `OSError` with a
    network errno, or a PostgreSQL error whose SQLSTATE says so, on `err` or what it wraps
    (SQLAlchemy's `orig`, the cause it was raised from)."""
    seen: set[int] = set()
    found: BaseException | None = err
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        if isinstance(found, (ConnectionError, TimeoutError, socket.gaierror)):
            return True
        if isinstance(found, OSError) and found.errno in _UNREACHABLE_ERRNOS:
            return True
        state = getattr(found, "sqlstate", None)
        if isinstance(state, str) and state.startswith(_UNREACHABLE_SQLSTATES):
            return True
        orig = getattr(found, "orig", None)
        found = orig if isinstance(orig, BaseException) else found.__cause__
    return False


_CAUSES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("disk is full", "no space left"), "the disk is full"),
    (
        ("readonly database", "read-only", "permission denied", "unable to open database"),
        "no permission to write it",
    ),
    (("database is locked",), "another process holds its write lock"),
    (
        (
            "connect call failed",
            "connection refused",
            "connection reset",
            "connection aborted",
            "broken pipe",
            "network is unreachable",
            "cannot assign requested address",
            "could not connect",
            "connection was closed",
            "closed the connection",
            "shutting down",
            "terminating connection",
            "timed out",
            "timeout",
            "name or service not known",
            "no route to host",
        ),
        SERVER_DOWN,
    ),
)
"""What a driver's words mean, for people: the first cause whose words the error contains."""


def unwritable_cause(error: str | BaseException) -> str:
    """Why the store cannot be written, in a few words ('disk is full', 'the database server is
    down or unreachable', ...): the refusal's `cause` when its type said it, else from the
    driver's words; the error itself when unknown."""
    if isinstance(error, StoreRefusedError) and error.cause:
        return error.cause
    error = str(error)
    lowered = error.lower()
    for words, cause in _CAUSES:
        if any(w in lowered for w in words):
            return cause
    return error
