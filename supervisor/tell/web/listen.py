"""`http.listen` read as an address (the daemon's server binds it, the CLI calls it): no web
stack imported for that."""

from __future__ import annotations


class ListenError(ValueError):
    """`http.listen` is not HOST:PORT."""


def parse_listen(text: str) -> tuple[str, int]:
    """`127.0.0.1:9464` -> ("127.0.0.1", 9464); `[::1]:9464` -> ("::1", 9464)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if (
        not sep
        or not host
        or not (port.isascii() and port.isdigit())
        or not 0 <= int(port) <= 65535
    ):
        raise ListenError(f"http.listen: expected HOST:PORT like 127.0.0.1:9464, got {text!r}")
    return host, int(port)
