"""Schema revisions with Alembic, for both engines (`supervisor/record/store/revisions/`).

`upgrade` brings a store to the newest revision on the store's own connection, inside its write
transaction. A store made before Alembic carries no `alembic_version`: it is stamped at the
revision its marks say it already has (SQLite `user_version` 2, the typed timeline) and upgraded
from there; `user_version` 1 is typed first by `supervisor.record.store.migrate`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

REVISIONS = Path(__file__).parent / "revisions"
SCHEMA_2 = "0001"
"""The revision a store of SQLite `user_version` 2 already has."""


def _config(conn: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(REVISIONS))
    if conn is not None:
        config.attributes["connection"] = conn
    return config


@cache
def head() -> str:
    found = ScriptDirectory.from_config(_config()).get_current_head()
    assert found is not None
    return found


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def upgrade(conn: Connection, *, stamp: str | None = None) -> None:
    """Upgrade to head (stamping `stamp` first: a store made before Alembic)."""
    if stamp is not None:
        command.stamp(_config(conn), stamp)
    if stamp is not None or current_revision(conn) != head():
        command.upgrade(_config(conn), "head")


def upgrade_to(conn: Connection, revision: str) -> None:
    """Upgrade to one given revision (what an older release made: the specs build one)."""
    command.upgrade(_config(conn), revision)
