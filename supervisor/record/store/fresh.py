"""A new SQLite store, made as a copy of the first one this process made.

Making a store runs every Alembic revision (`supervisor.record.store.revise`): about 0.1 CPU-s
of SQLAlchemy compiling DDL, each time. A process that makes many stores (the test suite made
497 in its four workers, 30 CPU-s a run) makes the first as before, on a file of its own in a
temporary folder, keeps that file's bytes (once SQLite has closed it: the WAL checkpointed into
it) and writes them as each next new store. The copy is the revisions' own work, byte for byte:
the same tables, triggers, `alembic_version` and marks (`application_id`, `user_version`, WAL
mode). A daemon makes at most one store, so it only ever takes the first path.

A copy is placed only where no file is: written beside the target under a name of its own,
synced, then linked to the target's name (`link` fails if another process made it meanwhile).
Whatever fails on the way (a full disk, a folder it may not write, a file system without hard
links) leaves the target as it was, and the store is made as before, which says why it cannot
be.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path

_image: bytes | None = None
"""The first new store this process made, as its file's bytes (None: none made yet)."""


async def place_copy(path: Path, make: Callable[[Path], Awaitable[None]]) -> None:
    """Where `path` is not a file yet: a copy of a store `make` made (once per process) put
    there. Nothing changes when that cannot be done: the caller then makes the store itself."""
    global _image
    if _image is None:
        _image = await asyncio.to_thread(_made_image, await _make_in_temp(make))
    if _image:
        await asyncio.to_thread(_place, path, _image)


async def _make_in_temp(make: Callable[[Path], Awaitable[None]]) -> Path | None:
    try:
        folder = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="fleet-store-"))
    except OSError:
        return None
    path = folder / "fresh.db"
    with suppress(Exception):
        await make(path)
    return path


def _made_image(path: Path | None) -> bytes:
    """The bytes of the store `make` left at `path` (empty: none usable), and its folder gone."""
    if path is None:
        return b""
    try:
        wal = path.with_name(path.name + "-wal")
        # closed: SQLite checkpointed its WAL into the file and removed it
        return b"" if wal.exists() else path.read_bytes()
    except OSError:
        return b""
    finally:
        for leftover in path.parent.iterdir():
            with suppress(OSError):
                leftover.unlink()
        with suppress(OSError):
            path.parent.rmdir()


def _place(path: Path, image: bytes) -> None:
    part = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
    try:
        # 0o644 less the umask: the mode SQLite gives a file it creates
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(image)
            file.flush()
            os.fsync(file.fileno())
        os.link(part, path)  # FileExistsError: another process made it first
    except OSError:
        pass
    finally:
        with suppress(OSError):
            part.unlink()
