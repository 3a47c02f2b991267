"""The one exception the store raises: a plain sentence, ready to show a person."""

from __future__ import annotations


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
    """The file itself refused (locked by another process, read-only, disk full): worth a retry,
    unlike e.g. ``no incident 42``."""


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
        "the database server is down or unreachable",
    ),
)
"""What a driver's words mean, for people: the first cause whose words the error contains."""


def unwritable_cause(error: str) -> str:
    """Why the store cannot be written, in a few words ('disk is full', 'the database server is
    down or unreachable', ...), from the driver's error; the error itself when unknown."""
    lowered = error.lower()
    for words, cause in _CAUSES:
        if any(w in lowered for w in words):
            return cause
    return error
