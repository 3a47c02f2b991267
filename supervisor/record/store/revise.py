"""Schema revisions with Alembic, for both engines (`supervisor/record/store/revisions/`).

`upgrade` brings a store to the newest revision on the store's own connection, inside its write
transaction. A store made before Alembic carries no `alembic_version`: it is stamped at the
revision its marks say it already has (SQLite `user_version` 2, the typed timeline) and upgraded
from there; `user_version` 1 is typed first by `supervisor.record.store.migrate`.

Alembic (and Mako, which it imports) is loaded only when a store must be made or upgraded: a
store already at `HEAD` is read with one query, so a daemon restarted on its store does not carry
them (~4 MB resident).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config

REVISIONS = Path(__file__).parent / "revisions"
SCHEMA_2 = "0001"
"""The revision a store of SQLite `user_version` 2 already has."""
HEAD = "0004"
"""The newest revision in `revisions/versions/` (a spec holds it to Alembic's own reading)."""
_VERSION_TABLE = "alembic_version"
_READ_VERSION = text("SELECT version_num FROM alembic_version")


def _config(conn: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(REVISIONS))
    if conn is not None:
        config.attributes["connection"] = conn
    return config


@cache
def head() -> str:
    """The newest revision as Alembic reads the scripts (`HEAD` is what the code uses)."""
    from alembic.script import ScriptDirectory

    found = ScriptDirectory.from_config(_config()).get_current_head()
    assert found is not None
    return found


def current_revision(conn: Connection) -> str | None:
    """The store's revision (None: no Alembic table); Alembic's reading when it has several."""
    if not inspect(conn).has_table(_VERSION_TABLE):
        return None
    found = conn.execute(_READ_VERSION).scalars().all()
    if len(found) == 1:
        return str(found[0])
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def upgrade(conn: Connection, *, stamp: str | None = None) -> None:
    """Upgrade to head (stamping `stamp` first: a store made before Alembic)."""
    if stamp is None and current_revision(conn) == HEAD:
        return
    from alembic import command

    if stamp is not None:
        command.stamp(_config(conn), stamp)
    if stamp is not None or current_revision(conn) != head():
        command.upgrade(_config(conn), "head")


def upgrade_to(conn: Connection, revision: str) -> None:
    """Upgrade to one given revision (what an older release made: the specs build one)."""
    from alembic import command

    command.upgrade(_config(conn), revision)
