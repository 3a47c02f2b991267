"""The spill file: the writes a store refused, kept on local disk as well as in memory, so that
a process that dies during an outage (OOM, a watchdog kill, a reboot) loses none of them.

One file per process and store, made at the first write the store refuses and removed once the
store has taken every write it holds: ``FOLDER/<store key>-<spill id>.spill``, the store key a
hash of the store's name (its path or URL), the spill id a UUID. Its first line says whose it
is (``{"spill": ID, "store": ..., "pid": ..., "started": ...}``); each next line is one queued
write with its number (`supervisor.record.store.queued`): the write's identity is (spill id,
number). Lines are appended with one `write` each (a process killed after it returns loses
nothing: the kernel holds it) and the file is fsynced once per write group (the writes queued
in one turn of the event loop), so a machine that loses power loses at most that turn's.

The process holds an exclusive `flock` on its file while it lives: the kernel drops it when the
process dies, however it dies, so a file nobody holds is a dead process's, to replay
(`dead_spills`, `read_spill`).

The file is bounded (`SpillPlace.max_bytes`): past it the oldest droppable writes (probe
samples, snapshot saves, heartbeats) are dropped first, by rewriting the file without them
(written beside it, fsynced, renamed over it); a timeline entry, an attempt or a message is
never dropped, past the bound too. When the file cannot be written (its own disk full, no
permission) it says so once (`problem`) and takes no more writes: the memory queue goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import json
import os
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog

from supervisor.record.store.queued import SpillLineError, Write, decode_line, encode_line

log = structlog.get_logger("supervisor.store")

SUFFIX = ".spill"
MAX_BYTES = 4 * 1024 * 1024
"""The spill file's bound by default (`store.spill_max`)."""
FORMAT = 1


@dataclass(frozen=True, kw_only=True)
class SpillPlace:
    """Where a store's spill files go, and how large one may grow."""

    folder: Path
    max_bytes: int = MAX_BYTES


def spill_place(
    folder: Path | None,
    max_bytes: int = MAX_BYTES,
    *,
    config_dir: Path,
    environ: Mapping[str, str] = os.environ,
) -> SpillPlace:
    """Where the spill files go (`store.spill_dir`): the folder named, else `spill` in the
    unit's state directory when systemd gave one (`$STATE_DIRECTORY`, its first when several),
    else `spill` beside the config file."""
    if folder is None:
        state = environ.get("STATE_DIRECTORY", "").split(":")[0]
        folder = Path(state) / "spill" if state else config_dir / "spill"
    return SpillPlace(folder=folder, max_bytes=max_bytes)


def store_key(store: str) -> str:
    """The part of a spill file's name that says which store it is for."""
    return hashlib.sha256(store.encode()).hexdigest()[:16]


def _cause(err: OSError, folder: Path) -> str:
    """Why the spill file cannot be written, in a few words."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk holding {folder} is full"
    if err.errno == errno.EROFS:
        return f"the filesystem holding {folder} is read-only"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to write {folder}"
    return f"cannot write {folder}"


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class _Line:
    seq: int
    droppable: bool
    data: bytes


class SpillFile:
    """This process's spill of one store's refused writes (see the module's docstring)."""

    def __init__(self, place: SpillPlace, *, store: str, spill_id: str) -> None:
        self.place = place
        self.store = store
        self.spill_id = spill_id
        self.path = place.folder / f"{store_key(store)}-{spill_id}{SUFFIX}"
        #: the leader's epoch and name the writes are made under (set before the file is made)
        self.epoch: int | None = None
        self.holder = ""
        self.problem = ""  #: '' while the file takes writes; else why not, for people
        self.dropped = 0  #: droppable writes dropped to keep the file in its bound
        self.groups = 0  #: write groups fsynced
        self._fd: int | None = None
        self._size = 0
        self._lines: deque[_Line] = deque()  #: what the file holds after its header
        self._header = b""
        self._sync_due = False
        self._over_bound = False

    @property
    def exists(self) -> bool:
        return self._fd is not None

    @property
    def size(self) -> int:
        return self._size

    def add(self, seq: int, write: Write) -> bool:
        """Append the write (fsynced with its group at the end of this loop turn); whether the
        file holds it."""
        if self.problem:
            return False
        try:
            line = _Line(seq, write.DROPPABLE, encode_line(seq, write))
        except (ValueError, TypeError) as err:  # a value JSON cannot hold: kept in memory only
            log.error("queued write not spilled", write=write.NAME, error=str(err))
            return False
        try:
            if self._fd is None:
                self._create()
            if self._size + len(line.data) > self.place.max_bytes:
                self._bound(len(line.data))
            self._append(line)
        except OSError as err:
            self._refuse(err)
            return False
        self._schedule_sync()
        return True

    def _create(self) -> None:
        self.place.folder.mkdir(parents=True, exist_ok=True)
        started = datetime.now(UTC).isoformat()
        header = {
            "spill": self.spill_id,
            "store": self.store,
            "pid": os.getpid(),
            "started": started,
            "epoch": self.epoch,
            "holder": self.holder,
            "format": FORMAT,
        }
        self._header = json.dumps(header).encode() + b"\n"
        self._fd, self._size = _locked_file(self.path, self._header), len(self._header)
        log.info("store outage: spilling queued writes to disk", spill=str(self.path))

    def _append(self, line: _Line) -> None:
        assert self._fd is not None
        try:
            _write_all(self._fd, line.data)
        except OSError:
            with contextlib.suppress(OSError):  # a torn line would end the file's reading
                os.ftruncate(self._fd, self._size)
            raise
        self._size += len(line.data)
        self._lines.append(line)

    def _bound(self, adding: int) -> None:
        """Make room for `adding` bytes: drop the oldest droppable writes (to a quarter under
        the bound, so that this is not done at every write)."""
        target = self.place.max_bytes * 3 // 4 - adding
        kept: deque[_Line] = deque()
        size = len(self._header) + sum(len(line.data) for line in self._lines)
        dropped = 0
        for line in self._lines:
            if size > target and line.droppable:
                size -= len(line.data)
                dropped += 1
            else:
                kept.append(line)
        if dropped:
            self._rewrite(kept)
            if not self.dropped:
                log.warning(
                    "spill file full: dropping the oldest samples",
                    spill=str(self.path),
                    max_bytes=self.place.max_bytes,
                )
            self.dropped += dropped
        if size + adding > self.place.max_bytes and not self._over_bound:
            self._over_bound = True
            log.warning(
                "spill file past its bound: only writes that are never dropped are left",
                spill=str(self.path),
                max_bytes=self.place.max_bytes,
            )

    def _rewrite(self, kept: deque[_Line]) -> None:
        """The file without the dropped lines: written beside it, fsynced, locked and renamed
        over it, so that a crash leaves either the old file or the new one."""
        assert self._fd is not None
        fresh = self.path.with_name(self.path.name + ".new")
        data = self._header + b"".join(line.data for line in kept)
        fd = _locked_file(fresh, data, over=self.path)
        os.close(self._fd)
        self._fd = fd
        self._lines = kept
        self._size = len(self._header) + sum(len(line.data) for line in kept)

    def _refuse(self, err: OSError) -> None:
        self.problem = f"{_cause(err, self.place.folder)} ({err.strerror or err})"
        log.warning(
            "spill file refused: the queued writes are kept in memory only",
            spill=str(self.path),
            problem=self.problem,
        )

    def _schedule_sync(self) -> None:
        if self._sync_due:
            return
        self._sync_due = True
        try:
            asyncio.get_running_loop().call_soon(self.sync)
        except RuntimeError:  # no loop (a tool, a spec): at once
            self.sync()

    def sync(self) -> None:
        """fsync what was appended since the last (one write group)."""
        self._sync_due = False
        if self._fd is None or self.problem:
            return
        try:
            os.fsync(self._fd)
        except OSError as err:
            self._refuse(err)
            return
        self.groups += 1

    def remove(self) -> None:
        """Every write it holds is in the store: the file goes (and the next outage starts
        another)."""
        if self._fd is None:
            self._reset()
            return
        try:
            self.path.unlink()
            _sync_folder(self.place.folder)
        except OSError as err:
            log.warning("spill file not removed", spill=str(self.path), error=str(err))
        os.close(self._fd)
        self._reset()

    def release(self) -> None:
        """Close it, kept on disk (the writes it holds are replayed at the next start)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
        self._fd = None

    def _reset(self) -> None:
        self._fd = None
        self._size = 0
        self._lines.clear()
        self.problem = ""
        self.dropped = 0
        self._over_bound = False


def _locked_file(path: Path, data: bytes, *, over: Path | None = None) -> int:
    """A file made at `path` (a new one; or, renamed `over` a file, one made afresh), locked by
    us, holding `data`, fsynced with its folder: its descriptor. On an error it is removed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_EXCL if over is None else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _write_all(fd, data)
        os.fsync(fd)
        if over is not None:
            os.replace(path, over)
        _sync_folder(path.parent)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


@dataclass(frozen=True, kw_only=True)
class DeadSpill:
    """A spill file its process left (nobody holds its lock); held by us from `dead_spills`
    on, until `done` removes it or `release` leaves it."""

    path: Path
    spill_id: str
    pid: int
    started: str
    writes: list[tuple[int, Write]]
    unreadable: int  #: lines that could not be read (a torn last line, say)
    fd: int
    epoch: int | None = None  #: the leader's epoch its process wrote under (None: unfenced)
    holder: str = ""

    def done(self) -> None:
        """Every write it held is in the store."""
        with contextlib.suppress(OSError):
            self.path.unlink()
            _sync_folder(self.path.parent)
        self.release()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def dead_spills(place: SpillPlace, *, store: str) -> list[DeadSpill]:
    """The spill files of `store` in the place's folder that no living process holds, oldest
    first, each locked by us now (a file another process holds is left alone; a leftover of an
    interrupted rewrite is removed)."""
    folder = place.folder
    key = store_key(store)
    try:
        leftovers = sorted(folder.glob(f"{key}-*{SUFFIX}.new"))
        paths = sorted(folder.glob(f"{key}-*{SUFFIX}"))
    except OSError as err:
        log.warning("spill folder unreadable: nothing replayed", folder=str(folder), error=str(err))
        return []
    found = []
    for path in leftovers:
        fd = _lock_dead(path)
        if fd is not None:
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)
    for path in paths:
        fd = _lock_dead(path)
        if fd is None:
            continue
        spill = read_spill(path, fd)
        if spill is None:
            os.close(fd)
            continue
        found.append(spill)
    return sorted(found, key=lambda spill: spill.started)


def _lock_dead(path: Path) -> int | None:
    """The file opened and locked by us, or None: gone, or its process lives (holds it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def read_spill(path: Path, fd: int) -> DeadSpill | None:
    """The writes of a spill file (None: not a spill file this code reads)."""
    with os.fdopen(os.dup(fd), "rb") as stream:
        lines = stream.read().split(b"\n")
    try:
        header = json.loads(lines[0])
        spill_id, pid, started = str(header["spill"]), int(header["pid"]), str(header["started"])
        epoch = header.get("epoch")
        holder = str(header.get("holder") or "")
        if epoch is not None and not isinstance(epoch, int):
            raise TypeError(f"epoch {epoch!r}")
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        log.warning("not a spill file: left alone", spill=str(path))
        return None
    writes, unreadable = [], 0
    for line in lines[1:]:
        if not line:
            continue
        try:
            writes.append(decode_line(line))
        except SpillLineError as err:
            unreadable += 1
            log.warning("spill line unreadable: skipped", spill=str(path), error=str(err))
    return DeadSpill(
        path=path,
        spill_id=spill_id,
        pid=pid,
        started=started,
        writes=writes,
        unreadable=unreadable,
        fd=fd,
        epoch=epoch,
        holder=holder,
    )
