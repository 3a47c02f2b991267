"""Which timeline entries deserve a message (what the composer remembers per incident, and
the settings it composes by, are `supervisor.tell.telegram.memory`).

Pure functions: `compose` turns one timeline row into drafts, `tick` releases what waits on
time (a flapping incident's held "resolved", reminders of an escalation nobody acknowledged).
One thread per incident; a reopened incident (flapping) gives at most one "flapping" update per
`flap_every` and one "resolved" once it has stayed up for `settle`.

"Fixed by" is read from what the timeline holds before the transition to healthy: the repair's
verification entry is written after it (the runner learns of the heal from that transition), so
the composer follows the attempt itself: the rule that started it (or the person's `/restart`)
and the steps that passed. A host's incident also holds its endpoints' entries: only what a
person must act on (an escalation) is told from them, once per rule, in the host's thread.

A busy endpoint (a saturated server: load, never repaired) says nothing at first; once it has
been busy for `busy_after` a person is told once, and told again when it is no longer busy.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from supervisor.judge.machine import HostState, State, Trigger
from supervisor.record.store.outbox import OutboxDraft
from supervisor.record.store.records import IncidentRow, SubjectKind, TimelineRow
from supervisor.record.timeline.decision import Decision
from supervisor.record.timeline.repair import Diagnosis, Escalation, StepRan, Verification
from supervisor.record.timeline.state import Transition
from supervisor.tell.telegram import texts
from supervisor.tell.telegram.memory import Memory, Settings

_PROBLEMS = (State.DOWN, State.DEGRADED)
_SEEN_MAX = 50

__all__ = ["Result", "compose", "tick"]

Result = tuple[list[OutboxDraft], Memory]


def compose(row: TimelineRow, incident: IncidentRow, memory: Memory, settings: Settings) -> Result:
    """The drafts one timeline row gives (often none) and the incident's new memory."""
    record = row.record
    if row.subject != incident.subject:
        return _in_host(row, incident, memory)
    if isinstance(record, Transition):
        return _transition(row, record, incident, memory, settings)
    name = incident.subject
    if isinstance(record, StepRan):
        return [], _step(record, memory)
    line = record.summary
    if isinstance(record, Diagnosis):
        key = _identity(record.state, record.rule, *record.scopes)
        return _once(memory, "diagnosis", key, texts.diagnosis(name, line), incident)
    if isinstance(record, Decision | Escalation) and _is_plan(record):
        return _once(memory, "plan", _plan(record), texts.plan(name, line), incident)
    if isinstance(record, Verification):
        text = texts.repair_result(name, record.ok, line)
        return _once(memory, "repair", _identity(record.rule, record.ok), text, incident)
    return [], memory


def _identity(*parts: object) -> str:
    """What makes two records the same news for a person (`_once`): their ids (a rule, a row)
    and typed fields (a reason as it was given), never the line they render."""
    return "|".join("" if part is None else str(part) for part in parts)


def _plan(record: Decision | Escalation) -> str:
    if isinstance(record, Decision):
        return _identity(record.outcome, record.rule, record.budget, *record.plan)
    return _identity("escalation", record.rule, record.why)


def _is_plan(record: object) -> bool:
    """A dry run's account of what it would do (a repair, or an escalation)."""
    if isinstance(record, Escalation):
        return record.dry_run
    return isinstance(record, Decision) and record.is_plan


def _transition(
    row: TimelineRow, record: Transition, incident: IncidentRow, memory: Memory, settings: Settings
) -> Result:
    source, dest, note = record.source, record.dest, record.note
    name = incident.subject
    if incident.subject_kind is SubjectKind.HOST:
        if dest is HostState.UNREACHABLE:
            endpoints = list(settings.host_endpoints.get(name, ()))
            text = texts.host_opened(name, note, endpoints, incident.id)
            return _problem(row, incident, memory, settings, text)
        if dest is HostState.REACHABLE:
            return _resolve(row, memory, texts.host_resolved(name, row.at - incident.opened_at))
        return [], memory
    trigger = record.trigger
    if State.BUSY in (dest, source):
        busy = _busy(row, record, incident, memory)
        if busy is not None:
            return busy
        memory = replace(memory, busy_since=None)
    if dest is State.HEALTHY:
        fixed_by = memory.fixed_by if source in (State.VERIFYING, State.STARTING) else ""
        memory = replace(memory, repair="", steps=(), fixed_by="")
        took = row.at - incident.opened_at
        text = texts.resolved(name, took, _how(record), fixed_by, memory.downs)
        return _resolve(row, memory, text)
    memory = _attempt(record, memory)
    if dest in _PROBLEMS and record.opens:
        routes = settings.routes_behind.get(name, ())
        text = texts.opened(name, dest, _symptom(record, incident), incident.id, routes)
        return _problem(row, incident, memory, settings, text)
    if trigger is Trigger.REMEDIATE:  # each is a new attempt: the row is its identity
        return _once(memory, "repairing", f"#{row.id}", texts.repairing(name, note), incident)
    if trigger is Trigger.RECONSIDER:  # no more reminders: it is being repaired again
        memory = replace(memory, escalated_at=None, reminded_at=None)
        text = texts.reconsidered(name, note)
        return _once(memory, "reconsidered", f"#{row.id}", text, incident)
    if trigger is Trigger.ESCALATE:
        why = record.why or note
        memory = replace(
            memory, escalated_at=row.at, why=why, reminded_at=None, acked_by="", closed=False
        )
        text = texts.escalated(name, why, record.runbook or "", incident.id)
        return _once(memory, "escalated", _identity(record.rule, why), text, incident)
    return [], memory


def _busy(
    row: TimelineRow, record: Transition, incident: IncidentRow, memory: Memory
) -> Result | None:
    """Going busy: nothing yet (`tick` tells a person if it lasts). Busy -> healthy with nothing
    but load in the incident: quiet, unless a person was told it is busy. None: go on as usual."""
    if record.dest is State.BUSY:
        return [], replace(memory, busy_since=memory.busy_since or row.at, closed=False)
    if record.dest is not State.HEALTHY:
        return None
    lasted = row.at - (memory.busy_since or incident.opened_at)
    after = replace(memory, busy_since=None, closed=True)
    if not memory.busy_told:
        return [], after
    text = texts.busy_over(incident.subject, lasted)
    return [OutboxDraft(kind="busy_over", text=text, incident_id=incident.id)], after


def _attempt(record: Transition, memory: Memory) -> Memory:
    """Follow a repair through its transitions: which rule started it, whether its steps passed
    (`verify`), or a person's restart; any other move (verification ran out, an escalation, a
    restart nobody here asked for) means nothing we did is under way."""
    trigger = record.trigger
    if trigger is Trigger.REMEDIATE:
        return replace(memory, repair=record.rule or record.note, steps=(), fixed_by="")
    if trigger is Trigger.VERIFY:
        return replace(memory, fixed_by=_did(memory.repair, memory.steps), repair="", steps=())
    if trigger is Trigger.RESTARTED and record.actor is not None:
        fixed_by = _did(f"/restart by {record.actor.who}", memory.steps)
        return replace(memory, fixed_by=fixed_by, repair="", steps=())
    if memory.repair or memory.steps or memory.fixed_by:
        return replace(memory, repair="", steps=(), fixed_by="")
    return memory


def _did(what: str, steps: tuple[str, ...]) -> str:
    """`r1 (restart_units on ds4)`; '' when no step passed (a rule that only waits did nothing)."""
    return f"{what} ({'; '.join(steps)})" if what and steps else ""


def _step(record: StepRan, memory: Memory) -> Memory:
    """A step that passed, kept for "fixed by" as `restart_units on ds4`."""
    if not record.done:
        return memory  # a failed or only planned (dry run) step
    done = f"{record.action} on {record.target}"
    return replace(memory, steps=(*memory.steps, done)[-_SEEN_MAX:])


def _in_host(row: TimelineRow, incident: IncidentRow, memory: Memory) -> Result:
    """An endpoint's entry in its host's incident: the host's messages speak for its endpoints,
    except for what a person must do. An escalation is told in the host's thread, once per rule
    (every endpoint of a frozen host asks for the same power-cycle)."""
    record = row.record
    if incident.subject_kind is not SubjectKind.HOST or not isinstance(record, Transition):
        return [], memory
    if record.trigger is not Trigger.ESCALATE:
        return [], memory
    why = record.why or record.note
    rule = record.rule or ""
    runbook = record.runbook or ""
    text = texts.escalated(row.subject, why, runbook, incident.id, host=incident.subject)
    drafts, after = _once(memory, "escalated", _identity(rule or why), text, incident)
    if not drafts:
        return [], memory
    after = replace(
        after, escalated_at=row.at, why=why, reminded_at=None, acked_by="", closed=False
    )
    return drafts, after


def _problem(
    row: TimelineRow, incident: IncidentRow, memory: Memory, settings: Settings, text: str
) -> Result:
    if memory.downs == 0:
        memory = replace(memory, downs=1, first_down=row.at, closed=False)
        return [OutboxDraft(kind="opened", text=text, incident_id=incident.id)], memory
    if not memory.closed:
        return [], memory  # e.g. degraded, then down: the thread already says it is a problem
    downs = memory.downs + 1
    memory = replace(memory, downs=downs, closed=False, held="", held_at=None)
    last = memory.flap_sent_at
    if last is not None and row.at - last < settings.flap_every:
        return [], memory
    first = memory.first_down or incident.opened_at
    text = texts.flapping(incident.subject, downs, row.at - first)
    draft = OutboxDraft(kind="flapping", text=text, incident_id=incident.id)
    return [draft], replace(memory, flap_sent_at=row.at)


def _resolve(row: TimelineRow, memory: Memory, text: str) -> Result:
    incident_id = row.incident_id
    memory = replace(memory, closed=True, escalated_at=None, reminded_at=None)
    if memory.downs > 1:
        return [], replace(memory, held=text, held_at=row.at)
    return [OutboxDraft(kind="resolved", text=text, incident_id=incident_id)], memory


def tick(incident: IncidentRow, memory: Memory, now: datetime, settings: Settings) -> Result:
    """What time releases: a held "resolved" once it stayed up, reminders while escalated."""
    drafts: list[OutboxDraft] = []
    since = memory.busy_since
    lasted = now - since if since is not None else None
    if lasted is not None and lasted >= settings.busy_after and not memory.busy_told:
        if incident.closed_at is None:
            text = texts.busy(incident.subject, incident.symptom, lasted, incident.id)
            drafts.append(OutboxDraft(kind="busy", text=text, incident_id=incident.id))
        memory = replace(memory, busy_told=True)
    if memory.held and memory.held_at is not None and now - memory.held_at >= settings.settle:
        if incident.closed_at is not None:
            drafts.append(OutboxDraft(kind="resolved", text=memory.held, incident_id=incident.id))
        memory = replace(memory, held="", held_at=None)
    if memory.escalated_at is not None and not memory.acked_by and not memory.closed:
        last = memory.reminded_at or memory.escalated_at
        if incident.closed_at is None and now - last >= settings.remind_every:
            waiting = now - memory.escalated_at
            text = texts.reminder(incident.subject, memory.why, incident.id, waiting)
            drafts.append(OutboxDraft(kind="reminder", text=text, incident_id=incident.id))
            memory = replace(memory, reminded_at=now)
    return drafts, memory


def _once(memory: Memory, kind: str, key: str, text: str, incident: IncidentRow) -> Result:
    """An informational message, at most once per incident for the same `key` (`_identity`)."""
    seen_key = f"{kind}:{key}"
    if seen_key in memory.seen:
        return [], memory
    memory = replace(memory, seen=(*memory.seen, seen_key)[-_SEEN_MAX:])
    return [OutboxDraft(kind=kind, text=text, incident_id=incident.id)], memory


def _symptom(record: Transition, incident: IncidentRow) -> str:
    if record.probe is not None and record.probe.reason:
        return record.probe.reason
    return incident.symptom


def _how(record: Transition) -> str:
    probe = record.probe
    if probe is None:
        return "it passes its checks again"
    figures = []
    if probe.ttft_s is not None:
        figures.append(f"ttft {probe.ttft_s}s")
    if probe.tok_s is not None:
        figures.append(f"{probe.tok_s} tok/s")
    return f"{probe.check} passed" + (f" ({', '.join(figures)})" if figures else "")
