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
