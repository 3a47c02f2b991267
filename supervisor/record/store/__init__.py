"""The store: endpoint and host states, incidents, their append-only timeline, probe samples.

One SQLite file (WAL), written by the daemon and read beside it by the CLI.
"""

from supervisor.record.store.errors import StoreError, StoreRefusedError
from supervisor.record.store.records import (
    AttemptRow,
    IncidentRow,
    SampleRow,
    Snapshot,
    SubjectKind,
    TimelineEntry,
    TimelineRow,
)
from supervisor.record.store.store import Store
from supervisor.record.timeline import EntryKind, JSONValue

__all__ = [
    "AttemptRow",
    "EntryKind",
    "IncidentRow",
    "JSONValue",
    "SampleRow",
    "Snapshot",
    "Store",
    "StoreError",
    "StoreRefusedError",
    "SubjectKind",
    "TimelineEntry",
    "TimelineRow",
]
