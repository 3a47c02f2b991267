"""Alembic's environment for the store: migrations always run on the connection the store
hands over (`supervisor.record.store.revise`), inside the store's own write transaction. Not a
package: Alembic loads this file by its path."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
