"""The tables that were made outside the revisions, under them: the notifier's (the composer's
cursor, the outbox, threads, the composer's incidents, refusals), the control API's (silences,
pauses, its journal), the doctor's runs, and on PostgreSQL the marks' table `store_meta`.

Until this revision each was made with `create_all` when missing, by the part that uses it (the
notifier's start, the control API's, a `doctor` run; `store_meta` on a PostgreSQL store's first
open), so a store made before it holds any of them, as its release made them. This revision makes
those the store lacks and brings those it has to this schema: `outbox.epoch`, which the releases
since leadership added with an ALTER when the notifier started, and the chat, user and message
ids as BIGINT, which a SQLite file made before PostgreSQL holds as INTEGER (SQLite stores either
as a 64-bit integer: the values are kept; on SQLite the table is copied into its new form).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op
from sqlalchemy.engine.interfaces import ReflectedColumn

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Columns = Callable[[], tuple[sa.Column[object], ...]]


def _notify_cursor() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("last_id", sa.Integer, nullable=False),
    )


def _outbox() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("chat_id", sa.BigInteger, nullable=False),
        sa.Column("incident_id", sa.Integer, nullable=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("parts_sent", sa.Integer, nullable=False, server_default="0"),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text, nullable=False, server_default=""),
        sa.Column("sent_at", sa.Text, nullable=True),
        sa.Column("message_id", sa.BigInteger, nullable=True),
        sa.Column("given_up", sa.Integer, nullable=False, server_default="0"),
        sa.Column("epoch", sa.Integer, nullable=True),
    )


def _notify_threads() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("incident_id", sa.Integer, primary_key=True),
        sa.Column("chat_id", sa.BigInteger, primary_key=True),
        sa.Column("message_id", sa.BigInteger, nullable=False),
    )


def _notify_incidents() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("incident_id", sa.Integer, primary_key=True),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("active", sa.Integer, nullable=False, server_default="0"),
    )


def _notify_refusals() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("user_id", sa.BigInteger, nullable=True),
        sa.Column("chat_id", sa.BigInteger, nullable=True),
        sa.Column("username", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
    )


def _control_silences() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("who", sa.Text, nullable=False),
        sa.Column("via", sa.Text, nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("until", sa.Text, nullable=False),
        sa.Column("ended_at", sa.Text, nullable=True),
        sa.Column("ended_by", sa.Text, nullable=False, server_default=""),
    )


def _control_pauses() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("scope", sa.Text, primary_key=True),
        sa.Column("who", sa.Text, nullable=False),
        sa.Column("via", sa.Text, nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("at", sa.Text, nullable=False),
    )


def _control_journal() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("subjects", sa.Text, nullable=False),
        sa.Column("who", sa.Text, nullable=False),
        sa.Column("via", sa.Text, nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("until", sa.Text, nullable=True),
        sa.Column("code", sa.Text, nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
    )


def _doctor_runs() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.Text, nullable=False),
        sa.Column("ok", sa.Integer, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("document", sa.Text, nullable=False),
    )


def _store_meta() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("value", sa.Integer, nullable=False),
    )


TABLES: dict[str, Columns] = {
    "notify_cursor": _notify_cursor,
    "outbox": _outbox,
    "notify_threads": _notify_threads,
    "notify_incidents": _notify_incidents,
    "notify_refusals": _notify_refusals,
    "control_silences": _control_silences,
    "control_pauses": _control_pauses,
    "control_journal": _control_journal,
    "doctor_runs": _doctor_runs,
}
PG_TABLES: dict[str, Columns] = {"store_meta": _store_meta}
"""PostgreSQL's only: the marks a SQLite file keeps as PRAGMAs (`application_id`, ...)."""

INDEXES = {
    "outbox": ("ix_outbox_pending", ["sent_at", "id"]),
    "control_journal": ("ix_control_journal_at", ["at"]),
}

LATER_COLUMNS = {"outbox": ("epoch", sa.Integer)}
"""Columns added after a table was first made (nullable): added where missing."""

WIDE_IDS = {
    "outbox": ("chat_id", "message_id"),
    "notify_threads": ("chat_id", "message_id"),
    "notify_refusals": ("user_id", "chat_id"),
}
"""Telegram's ids (chat ids of supergroups pass 2**31): BIGINT; INTEGER before PostgreSQL."""


def upgrade() -> None:
    bind = op.get_bind()
    found = sa.inspect(bind)
    have = set(found.get_table_names())
    tables = TABLES | (PG_TABLES if bind.dialect.name == "postgresql" else {})
    for name, columns in tables.items():
        if name in have:
            _adopt(name, {c["name"]: c for c in found.get_columns(name)})
            continue
        op.create_table(name, *columns())
        if name in INDEXES:
            index, on = INDEXES[name]
            op.create_index(index, name, on)


def _adopt(name: str, present: dict[str, ReflectedColumn]) -> None:
    """A table an earlier release made: its later columns added, its ids made BIGINT."""
    if name in LATER_COLUMNS and LATER_COLUMNS[name][0] not in present:
        column, kind = LATER_COLUMNS[name]
        op.add_column(name, sa.Column(column, kind, nullable=True))
    narrow = [
        present[c]
        for c in WIDE_IDS.get(name, ())
        if not isinstance(present[c]["type"], sa.BigInteger)
    ]
    if not narrow:
        return
    with op.batch_alter_table(name) as batch:
        for c in narrow:
            batch.alter_column(
                c["name"],
                type_=sa.BigInteger,
                existing_type=c["type"],
                existing_nullable=c["nullable"],
            )


def downgrade() -> None:
    raise NotImplementedError("the store is never migrated down")
