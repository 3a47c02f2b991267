"""The control surface: silence, unsilence, pause, resume, ack and restart, the same for every
transport (Telegram, the CLI through the daemon's HTTP, HTTP itself). Persisted in the store,
recorded with who and why (refusals too), and in force again after a restart of the daemon."""

from supervisor.control._api import ControlApi
from supervisor.control._desk import AckHook, ControlDesk
from supervisor.control._pausing import Pauses
from supervisor.control._silencing import Silences

__all__ = [
    "AckHook",
    "ControlApi",
    "ControlDesk",
    "Pauses",
    "Silences",
]
