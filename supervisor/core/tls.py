"""The TLS context every HTTP client of the daemon shares: certifi's CA bundle, read on the first
TLS connection (a fleet of plain-HTTP endpoints never holds its ~1.6 MB of certificates)."""

from __future__ import annotations

import os
import ssl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any, Self

import certifi


class CertifiContext(ssl.SSLContext):
    """`ssl.create_default_context(cafile=certifi.where())` that reads the CA bundle on its first
    TLS connection (`wrap_bio`: asyncio's; `wrap_socket`)."""

    _loaded = False

    def __new__(cls) -> Self:
        context = super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)  # hostname checked, cert required
        keylog = os.environ.get("SSLKEYLOGFILE")
        if keylog and not sys.flags.ignore_environment:  # as create_default_context does
            context.keylog_filename = keylog
        return context

    def _load(self) -> None:
        if not self._loaded:
            self.load_verify_locations(cafile=certifi.where())
            self._loaded = True

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self._load()
        return super().wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self._load()
        return super().wrap_socket(*args, **kwargs)


@cache
def default_tls() -> ssl.SSLContext:
    """One `CertifiContext` for the clients made without one."""
    return CertifiContext()


@contextmanager
def no_default_ca_reads() -> Iterator[None]:
    """While it lasts, `ssl.create_default_context()` gives a `CertifiContext` (read on its first
    TLS connection) and `SSLContext.set_default_verify_paths` reads nothing: for importing a
    library that makes default contexts at import time for clients the daemon never makes
    (aiohttp makes two, each reading the system's CA bundle: ~2 MB resident for nothing)."""
    create, paths = ssl.create_default_context, ssl.SSLContext.set_default_verify_paths

    def lazy(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        return CertifiContext() if not args and not kwargs else create(*args, **kwargs)

    ssl.create_default_context = lazy
    ssl.SSLContext.set_default_verify_paths = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        ssl.create_default_context = create
        ssl.SSLContext.set_default_verify_paths = paths  # type: ignore[method-assign]
