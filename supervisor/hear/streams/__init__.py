"""Events from the hosts: what systemd says about the configured units, as it says it.

See docs/HOSTEVENTS.md. `HostEvents` runs one stream per host; each delivers `UnitEvent`s.
"""

from supervisor.hear.streams.backoff import Backoff
from supervisor.hear.streams.events import EventKind, UnitEvent
from supervisor.hear.streams.hub import HostEvents, units_by_host
from supervisor.hear.streams.local import LocalTransport
from supervisor.hear.streams.protocol import Transport, TransportError
from supervisor.hear.streams.ssh import SshTransport
from supervisor.hear.streams.stream import HostStream, StreamSettings

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
