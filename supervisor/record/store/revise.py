"""Schema revisions with Alembic, for both engines (`supervisor/record/store/revisions/`).

`upgrade` brings a store to the newest revision on the store's own connection, inside its write
transaction. The revisions make every table of the store, on both engines, and nothing else does
(a process's later new SQLite stores are copies of the first it made: `fresh`).
A store made before a revision took over its tables holds some of them already, as its release
made them: that revision makes those it lacks and brings those it has to its schema (0001: a
SQLite file made before Alembic, which carries no `alembic_version`, schema 1's timeline typed;
0005: the notifier's, control API's and doctor's tables, once made on demand), so a store of any
earlier release is upgraded in one step.

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
HEAD = "0006"
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


def upgrade(conn: Connection) -> None:
    """Upgrade to head: from the store's revision, or from nothing (a new store, or one made
    before Alembic)."""
    if current_revision(conn) == HEAD:
        return
    from alembic import command

    command.upgrade(_config(conn), "head")


def upgrade_to(conn: Connection, revision: str) -> None:
    """Upgrade to one given revision (what an older release made: the specs build one)."""
    from alembic import command

    command.upgrade(_config(conn), revision)
