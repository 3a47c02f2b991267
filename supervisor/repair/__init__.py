"""Remediation: guard rails, running a matched rule's steps, verification, escalation.

`Remediator` holds its parts: one repair task per endpoint (`_tasks`), the automatic repairs
(`_automatic`), the timeline writes and escalations (`_notes`); a person's restart is its own."""

from supervisor.repair._automatic import Approver, AutomaticRepairs, Paused
from supervisor.repair._notes import RepairNotes
from supervisor.repair._remediator import Remediator
from supervisor.repair._tasks import RepairTasks

__all__ = ["Approver", "AutomaticRepairs", "Paused", "Remediator", "RepairNotes", "RepairTasks"]
