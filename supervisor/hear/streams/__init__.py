"""Events from the hosts: what systemd says about the configured units, as it says it.

See docs/HOSTEVENTS.md. `HostEvents` runs one stream per host; each delivers `UnitEvent`s.
"""

from supervisor.hear.streams.backoff import Backoff
from supervisor.hear.streams.events import EventKind, UnitEvent
from supervisor.hear.streams.hub import HostEvents, units_by_host
from supervisor.hear.streams.stream import HostStream, StreamSettings
from supervisor.hear.streams.transport import (
    LocalTransport,
    SshTransport,
    Transport,
    TransportError,
)

__all__ = [
    "Backoff",
    "EventKind",
    "HostEvents",
    "HostStream",
    "LocalTransport",
    "SshTransport",
    "StreamSettings",
    "Transport",
    "TransportError",
    "UnitEvent",
    "units_by_host",
]
