"""The control surface: silence, unsilence, pause, resume, ack and restart, the same for every
transport (Telegram, the CLI through the daemon's HTTP, HTTP itself). Persisted in the store,
recorded with who and why (refusals too), and in force again after a restart of the daemon."""

from supervisor.control.api import ControlApi
from supervisor.control.model import Answer, Code, JournalRow, PauseRow, SilenceRow

__all__ = [
    "Answer",
    "Code",
    "ControlApi",
    "JournalRow",
    "PauseRow",
    "SilenceRow",
]
