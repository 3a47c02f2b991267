"""What differs between the two engines of the store, in one place: the upsert statement.

SQLite and PostgreSQL both say ``INSERT ... ON CONFLICT``; SQLAlchemy builds it per dialect.
"""

from __future__ import annotations

from sqlalchemy import Table, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

Upsert = sqlite.Insert | postgresql.Insert


def upsert(conn: AsyncConnection, table: Table) -> Upsert:
    """An INSERT that can take ``on_conflict_do_update`` / ``on_conflict_do_nothing``."""
    return upsert_for(conn.dialect.name, table)


def upsert_for(dialect: str, table: Table) -> Upsert:
    """`upsert` for a dialect's name (for statements built once and cached per dialect)."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


SCHEMA_LOCK = 0x46535550  # "FSUP"


async def schema_lock(conn: AsyncConnection) -> None:
    """Serialise schema changes between processes for the rest of this transaction: on
    PostgreSQL a transaction-scoped advisory lock (two daemons starting at once would otherwise
    race to create the same table); SQLite's write transaction already holds the file's lock."""
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": SCHEMA_LOCK})
