"""The typed timeline: one frozen record per kind of thing that happened, stored with a type tag
and a versioned JSON payload, its summary rendered from its fields.

Writers build a record and hand it to the store inside a `supervisor.store.TimelineEntry`
(`at`, `subject`, `record`); readers get `TimelineRow.record` back and read its fields.
"""

from supervisor.timeline.base import REGISTRY, EntryKind, JSONValue, Record, kind_of, register
from supervisor.timeline.codec import PayloadError, Unknown, decode, encode
from supervisor.timeline.control import (
    Acked,
    Legacy,
    Note,
    Notification,
    Paused,
    Resumed,
    Silenced,
    Unsilenced,
)
from supervisor.timeline.decision import Decision, Outcome
from supervisor.timeline.parts import CommandRun, ProbeSample, ProgressSample
from supervisor.timeline.repair import (
    INTERRUPTED,
    AttemptFinished,
    AttemptStarted,
    Diagnosis,
    Escalation,
    Evidence,
    StepRan,
    Verification,
)
from supervisor.timeline.state import Probe, Transition
from supervisor.timeline.unit import UnitHeard

__all__ = [
    "INTERRUPTED",
    "REGISTRY",
    "Acked",
    "AttemptFinished",
    "AttemptStarted",
    "CommandRun",
    "Decision",
    "Diagnosis",
    "EntryKind",
    "Escalation",
    "Evidence",
    "JSONValue",
    "Legacy",
    "Note",
    "Notification",
    "Outcome",
    "Paused",
    "PayloadError",
    "Probe",
    "ProbeSample",
    "ProgressSample",
    "Record",
    "Resumed",
    "Silenced",
    "StepRan",
    "Transition",
    "UnitHeard",
    "Unknown",
    "Unsilenced",
    "Verification",
    "decode",
    "encode",
    "kind_of",
    "register",
]
