"""Why a SQLite store cannot be written, said where a person looks (issue 24): the filesystem
read-only (a real tmpfs remounted read-only) or no permission (root without the capability
that lets it write any file, as a service with a bounded capability set runs). SQLite's own words
(`unable to open database file`, `attempt to write a readonly database`) do not say which; the
daemon's start and `status` add why, in their one line.

A running daemon's store cannot turn read-only or lose its permission under it: its open files
keep the filesystem from being remounted read-only (`mount point is busy`) and permissions are
checked when a file is opened. So these causes show when the store is opened: the daemon
starting, and `status`. A store that fills up while the daemon runs: tests/test_store_full.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from supervisor.record.store.errors import StoreError
from supervisor.record.store.room import unwritable
from supervisor.record.store.store import Store
from tests.helpers import write_fleet

pytestmark = pytest.mark.slow

NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
"""Root that file permissions bind (as a unit with CapabilityBoundingSet= runs it)."""


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of the spec's own."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts a tmpfs)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def _fleet(tmp_path: Path, store: Path) -> Path:
    """A fleet whose store is `store`, made (and closed) by a first open."""
    async with await Store.open(store):
        pass
    endpoint = {"kind": "openai", "url": "http://127.0.0.1:9", "model": "m"}
    path = write_fleet(tmp_path, {"m": endpoint})
    document = yaml.safe_load(path.read_text())
    document["store"] = {"path": str(store)}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _read_only(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)


def _cli(config: Path, *args: str, prefix: list[str] | None = None) -> tuple[int, str]:
    """`supervisor --config CONFIG ARGS` as a real process: its exit code and what it said."""
    done = subprocess.run(
        [*(prefix or []), sys.executable, "-m", "supervisor", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).strip()


async def test_a_store_on_a_read_only_filesystem_says_so(tmp_path: Path, disk: Path) -> None:
    store = disk / "supervisor.db"
    config = await _fleet(tmp_path, store)
    _read_only(disk)
    why = f"the filesystem holding {store} is read-only"
    assert unwritable(store) == why
    said = f"cannot open store {store}: unable to open database file ({why})"
    with pytest.raises(StoreError) as raised:
        await Store.open(store)
    assert str(raised.value) == said
    for command in (["status"], ["run", "--log-format", "json"]):
        assert _cli(config, *command) == (2, f"fleet-supervisor: {said}")


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is missing")
async def test_a_store_without_permission_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    folder.mkdir()
    store = folder / "supervisor.db"
    config = await _fleet(tmp_path, store)
    store.chmod(0o444)
    folder.chmod(0o555)  # nor can SQLite make its -wal and -shm files beside it
    said = (
        f"cannot open store {store}: attempt to write a readonly database "
        f"(no permission to write {store})"
    )
    for command in (["status"], ["run", "--log-format", "json"]):
        assert _cli(config, *command, prefix=NO_DAC) == (2, f"fleet-supervisor: {said}")
