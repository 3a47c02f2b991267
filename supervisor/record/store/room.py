"""Whether a SQLite store's file can be written, as its filesystem says (what `status` prints
beside the stored state, since a daemon whose store cannot be written cannot record that
either; and what a store that cannot be opened adds to its error): its filesystem read-only,
its disk full, or no permission. PostgreSQL: the server is asked by opening the store."""

from __future__ import annotations

import os
from pathlib import Path

from supervisor.record.store.target import StoreTarget

MIN_FREE_BYTES = 64 * 1024
"""Less room than this and SQLite's next write (a WAL frame, a checkpoint) fails."""


def unwritable(target: StoreTarget) -> str:
    """'' when the store's file can be written; else why not, in one line."""
    if not isinstance(target, Path):
        return ""
    folder = target.parent
    try:
        room = os.statvfs(folder)
    except OSError as err:
        return f"cannot look at {folder}: {err.strerror or err}"
    if room.f_flag & os.ST_RDONLY:
        return f"the filesystem holding {target} is read-only"
    free = room.f_bavail * room.f_frsize
    if free < MIN_FREE_BYTES:
        return f"the disk holding {target} is full ({free} bytes free)"
    for path in (target, folder):
        if path.exists() and not os.access(path, os.W_OK):
            return f"no permission to write {path}"
    return ""
