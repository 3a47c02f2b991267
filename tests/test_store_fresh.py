"""A new SQLite store is a copy of the first one its process made with the revisions
(supervisor/record/store/fresh.py): the same tables, triggers, marks and Alembic revision as a
store the revisions make on the spot, with no revision run; a file that appears meanwhile is
never overwritten, and a copy that cannot be placed leaves nothing behind."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import Connection

from supervisor.record.store import fresh, revise
from supervisor.record.store.engine import _make_first
from supervisor.record.store.store import Store


def _described(path: Path) -> list[object]:
    """What a store is made of: its schema, its marks, its journal mode, its revision."""
    raw = sqlite3.connect(path)
    try:
        return [
            raw.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
            ).fetchall(),
            raw.execute("PRAGMA application_id").fetchone(),
            raw.execute("PRAGMA user_version").fetchone(),
            raw.execute("PRAGMA journal_mode").fetchone(),
            raw.execute("SELECT version_num FROM alembic_version").fetchall(),
        ]
    finally:
        raw.close()


def _stores(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(("-wal", "-shm")))


async def test_the_second_new_store_is_a_copy_of_the_first_and_what_the_revisions_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    revised = tmp_path / "revised.db"
    await _make_first(revised)  # the revisions, on the spot
    upgrades: list[str] = []
    upgrade = revise.upgrade

    def counted(conn: Connection) -> None:
        upgrades.append(conn.dialect.name)
        upgrade(conn)

    monkeypatch.setattr(revise, "upgrade", counted)
    monkeypatch.setattr(fresh, "_image", None)  # as in a process that has made no store yet
    for name in ("first.db", "second.db"):
        async with await Store.open(tmp_path / name):
            pass
    assert upgrades == ["sqlite"]  # the first, made in a folder of its own; none for either
    assert _described(tmp_path / "first.db")[0] != []
    assert _described(tmp_path / "first.db") == _described(revised)
    assert _described(tmp_path / "second.db") == _described(revised)
    assert _stores(tmp_path) == ["first.db", "revised.db", "second.db"]  # no copy left over


def test_a_file_already_there_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "supervisor.db"
    path.write_bytes(b"mine")
    fresh._place(path, b"a store")
    assert path.read_bytes() == b"mine"
    assert [p.name for p in tmp_path.iterdir()] == ["supervisor.db"]


def test_a_copy_that_cannot_be_placed_leaves_nothing(tmp_path: Path) -> None:
    fresh._place(tmp_path / "missing" / "supervisor.db", b"a store")
    assert list(tmp_path.iterdir()) == []
