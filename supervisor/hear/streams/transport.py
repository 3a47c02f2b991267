"""How the stream reaches a host: one small protocol, over SSH (asyncssh) or a local subprocess.

A transport runs short commands (`run`, each with a deadline) and one long one whose stdout is
read line by line (`follow`). `SshTransport` keeps ONE connection per host (opened with the
fleet's SSH settings, host key checked: `supervisor.execute.ssh.connect`) and runs both over
it, so confirming a unit's state never opens a second connection. A dead connection is found by
SSH keepalives (15 s x 3): the follow then ends, and the stream reconnects.

Errors are `TransportError`: `lasting` when trying again soon cannot help (the login or host key
was refused, the key cannot be read), else a connection that may come back.

The protocol and what both share are `protocol.py`; the transports `local.py` and `ssh.py`.
"""

from __future__ import annotations

from pathlib import Path

from supervisor.config.supervised import Host
from supervisor.hear.streams.local import LocalTransport
from supervisor.hear.streams.protocol import (
    Transport,
)
from supervisor.hear.streams.ssh import SshTransport

__all__ = ["transport_for"]


def transport_for(host: Host, known_hosts_default: Path | None = None) -> Transport:
    return LocalTransport(host) if host.local else SshTransport(host, known_hosts_default)
