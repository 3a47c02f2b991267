"""The typed timeline: one frozen record per kind of thing that happened, stored with a type tag
and a versioned JSON payload, its summary rendered from its fields.

Writers build a record and hand it to the store inside a `supervisor.record.store.TimelineEntry`
(`at`, `subject`, `record`); readers get `TimelineRow.record` back and read its fields.
"""

from supervisor.record.timeline.base import (
    REGISTRY,
    EntryKind,
    JSONValue,
    Record,
    kind_of,
    register,
)
from supervisor.record.timeline.codec import PayloadError, Unknown, decode, encode
from supervisor.record.timeline.control import (
    Acked,
    Legacy,
    Note,
    Notification,
    Paused,
    Resumed,
    Silenced,
    Unsilenced,
)
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.record.timeline.parts import CommandRun, ProbeSample, ProgressSample, UnitLeft
from supervisor.record.timeline.repair import (
    INTERRUPTED,
    AttemptFinished,
    AttemptStarted,
    Diagnosis,
    Escalation,
    Evidence,
    Settled,
    StepRan,
    StepStarted,
    UnitsLeft,
    Verification,
)
from supervisor.record.timeline.state import Probe, Transition
from supervisor.record.timeline.unit import UnitHeard

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
    "Settled",
    "Silenced",
    "StepRan",
    "StepStarted",
    "Transition",
    "UnitHeard",
    "UnitLeft",
    "UnitsLeft",
    "Unknown",
    "Unsilenced",
    "Verification",
    "decode",
    "encode",
    "kind_of",
    "register",
]
