"""Where a store lives: a SQLite file (the embedded default) or a PostgreSQL database.

A PostgreSQL URL names user, host, port and database; its password never comes from the fleet
YAML: it is given here from a file or the environment (``PGPASSWORD``, which the driver reads
itself), so `str()` of a target, used in every error, never shows one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Protocol

from sqlalchemy import URL, make_url
from sqlalchemy.exc import ArgumentError

from supervisor.record.store.errors import StoreError

DRIVER = "postgresql+asyncpg"


@dataclass(frozen=True, kw_only=True)
class PgTarget:
    """A PostgreSQL store: `url` without a password, `password` from a file or None."""

    url: str
    password: str | None = field(default=None, repr=False)  #: never in a repr (a log line)
    #: the server ends a session idle inside a transaction this long (a frozen leader's, holding
    #: the lease row): a third of the lease (at least 1 s), so a follower's claim is not held
    #: off past the lease
    idle_in_transaction_s: float = 5.0

    def sqlalchemy_url(self) -> URL:
        url = parse_pg_url(self.url)
        return url if self.password is None else url.set(password=self.password)

    def __str__(self) -> str:
        return parse_pg_url(self.url).render_as_string(hide_password=True)


StoreTarget = Path | PgTarget
"""What `Store.open` takes."""


def parse_pg_url(text: str) -> URL:
    """The URL of a PostgreSQL store; a clear StoreError for anything else."""
    try:
        url = make_url(text)
    except ArgumentError:
        raise StoreError(f"store url {text!r} is not a URL like {DRIVER}://USER@HOST/DB") from None
    if url.drivername != DRIVER:
        raise StoreError(f"store url must start with {DRIVER}://, got {url.drivername}://")
    if url.password is not None:
        raise StoreError(
            "store url must not hold a password: give it in store.password_file or PGPASSWORD"
        )
    if not url.database:
        raise StoreError(f"store url {text!r} names no database")
    return url


class StoreSettings(Protocol):
    """The store part of the fleet config (`supervisor.config.sections.StoreConfig`)."""

    @property
    def path(self) -> Path: ...
    @property
    def url(self) -> str | None: ...
    @property
    def password_file(self) -> Path | None: ...
    @property
    def lease(self) -> timedelta: ...


def store_target(settings: StoreSettings) -> StoreTarget:
    """The configured store: PostgreSQL when `url` is set (password from `password_file`, else
    the driver reads PGPASSWORD), else the SQLite file at `path`."""
    if settings.url is None:
        return settings.path
    parse_pg_url(settings.url)
    password = None
    if settings.password_file is not None:
        try:
            password = settings.password_file.read_text(encoding="utf-8").strip()
        except OSError as err:
            raise StoreError(
                f"cannot read store.password_file {settings.password_file}: {err.strerror or err}"
            ) from None
    return PgTarget(
        url=settings.url,
        password=password or None,  # empty: PGPASSWORD
        idle_in_transaction_s=max(1.0, settings.lease.total_seconds() / 3),
    )
