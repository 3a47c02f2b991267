"""Typing the timeline rows of a schema-1 store (summary + loose JSON), once, on open.

Each old kind has one reader that builds the typed record from the old `data` and, where the
data never held a field (a transition's source and destination, a probe's note, a step's
number), from the old summary, with plain str methods (`partition`, `removeprefix`). The record
must render back to the old summary exactly; when it does not (a summary worded in a way this
code does not know), the row becomes a `Legacy` record that keeps its kind, summary and data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from supervisor.core.actor import Actor
from supervisor.core.durations import parse_duration
from supervisor.judge.machine import HostState, State, Trigger
from supervisor.record.timeline.base import Record
from supervisor.record.timeline.codec import decode_value
from supervisor.record.timeline.control import Acked, Legacy, Note, Notification
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.record.timeline.parts import CommandRun, ProbeSample
from supervisor.record.timeline.repair import (
    INTERRUPTED,
    AttemptFinished,
    Diagnosis,
    Escalation,
    Evidence,
    StepRan,
    Verification,
)
from supervisor.record.timeline.state import Probe, Transition

Data = Mapping[str, Any]


def _sample(value: object) -> ProbeSample:
    return decode_value(ProbeSample, value)


def _commands(data: Data) -> tuple[CommandRun, ...]:
    return decode_value(tuple[CommandRun, ...], data.get("commands", []))


def _str(data: Data, key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None


def _transition(summary: str, data: Data) -> Record:
    of_host = summary.startswith("host ")
    head, _, note = summary.removeprefix("host ").partition(": ")
    source, _, dest = head.partition(" -> ")
    states: type[State] | type[HostState] = HostState if of_host else State
    if of_host:
        trigger = Trigger.HOST_BACK if dest == HostState.REACHABLE else Trigger.HOST_LOST
    else:
        trigger = Trigger(str(data.get("trigger", "")))
    until = _str(data, "until")
    failures = data.get("failures")
    rule, actor = _str(data, "rule"), None
    if trigger is Trigger.REMEDIATE and note.startswith("applying "):
        rule = note.removeprefix("applying ").partition(" ")[0]
    elif trigger is Trigger.VERIFY and " done: " in note:
        rule = note.partition(" done: ")[0]
    elif trigger is Trigger.RESTARTED and note.startswith("restarted by "):
        actor = Actor(who=note.removeprefix("restarted by "))
    return Transition(
        source=states(source),
        dest=states(dest),
        trigger=trigger,
        note=note,
        of_host=of_host,
        rule=rule,
        actor=actor,
        probe=_sample(data["probe"]) if "probe" in data else None,
        probes=tuple(_sample(p) for p in data["probes"]) if "probes" in data else None,
        host=_str(data, "host"),
        why=_str(data, "why"),
        runbook=_str(data, "runbook"),
        until=datetime.fromisoformat(until) if until else None,
        reason=_str(data, "reason"),
        failures=failures if isinstance(failures, int) else None,
    )


def _probe(summary: str, data: Data) -> Record:
    sample = _sample(data)
    note = summary.removeprefix(f"{sample.head} (").removesuffix(")")
    return Probe(sample=sample, note=note)


def _evidence(summary: str, data: Data) -> Record:
    collector = str(data["collector"])
    evidence_id = summary.removeprefix(f"{collector} (").partition(")")[0]
    return Evidence(
        evidence_id=evidence_id,
        collector=collector,
        scope=str(data["scope"]),
        error=str(data.get("error") or ""),
        facts=dict(data.get("facts") or {}),
        commands=_commands(data),
    )


def _diagnosis(summary: str, data: Data) -> Record:
    endpoint, _, rest = summary.partition(" (")
    state, _, verdict = rest.partition("): ")
    rule = _str(data, "rule")
    scopes = verdict.removeprefix(f"{rule} matched on ").split(", ") if rule else []
    lines = tuple(str(line) for line in data.get("lines", []))
    return Diagnosis(endpoint=endpoint, state=state, rule=rule, scopes=tuple(scopes), lines=lines)


def _step(summary: str, data: Data) -> Record:
    number, _, _ = summary.removeprefix("step ").partition(" ")
    action, target, ok = str(data["action"]), str(data["target"]), data["ok"] is True
    planned = summary.startswith(f"step {number} {action} on {target}: planned: ")
    verdict = "planned" if planned else ("ok" if ok else "failed")
    result = summary.removeprefix(f"step {number} {action} on {target}: {verdict}: ")
    return StepRan(
        index=int(number) - 1,
        action=action,
        target=target,
        ok=ok,
        planned=planned,
        result=result,
        needs_person=str(data.get("needs_person") or ""),
        commands=_commands(data),
    )


def _verification(summary: str, _data: Data) -> Record:
    if summary.startswith("verified: "):
        rule = summary.removeprefix("verified: ").removesuffix(" healed it")
        return Verification(rule=rule, ok=True, within_s=0.0)
    rule, _, outcome = summary.partition(": not verified within ")
    return Verification(rule=rule, ok=False, within_s=_seconds(outcome))


def _seconds(spelled: str) -> float:
    return parse_duration(spelled).total_seconds()


def _decision(summary: str, data: Data) -> Record:
    if data.get("outcome") == INTERRUPTED:
        return AttemptFinished(
            attempt=int(data["attempt"]), rule=str(data["rule"]), outcome=INTERRUPTED
        )
    for prefix, dry_run in (("escalated: ", False), ("dry run: would escalate: ", True)):
        if summary.startswith(prefix):
            note = summary.removeprefix(prefix)
            why, _, runbook = note.partition(" (runbook: ")
            return Escalation(why=why, runbook=runbook.removesuffix(")") or None, dry_run=dry_run)
    if summary == "automatic action is paused: not acting":
        return Decision(outcome=Outcome.PAUSED)
    if summary.startswith("now ") and summary.endswith(": not acting"):
        state = summary.removeprefix("now ").removesuffix(": not acting")
        return Decision(outcome=Outcome.MOVED_ON, state=state)
    if summary.startswith("dry run: would apply "):
        rule, _, rest = summary.removeprefix("dry run: would apply ").partition(" (")
        budget, _, plan = rest.partition("): ")
        steps = tuple(plan.split("; ")) if plan else ()
        return Decision(outcome=Outcome.DRY_RUN_PLAN, rule=rule, budget=budget, plan=steps)
    return Note(text=summary)


def _note(summary: str, _data: Data) -> Record:
    if summary.startswith("acknowledged by ") and summary.endswith(": no more reminders"):
        who, _, via = summary.removeprefix("acknowledged by ").partition(" on ")
        return Acked(who=who, via=via.removesuffix(": no more reminders"))
    return Note(text=summary)


def _notification(_summary: str, data: Data) -> Record:
    return Notification(
        channel="telegram",
        message=str(data["kind"]),
        chat_id=int(data["chat_id"]),
        outbox_id=int(data["outbox_id"]),
    )


def judged_v1(verdict: str) -> bool:
    """Whether a unit event of a version-1 entry was judged: its verdict's first words said
    (`not judged: remediating`, `evidence only`) when it was not."""
    return not verdict.startswith(("not judged", "evidence only"))


READERS: dict[str, Callable[[str, Data], Record]] = {
    "transition": _transition,
    "probe": _probe,
    "evidence": _evidence,
    "diagnosis": _diagnosis,
    "action": _step,
    "verification": _verification,
    "decision": _decision,
    "note": _note,
    "notification": _notification,
}
"""Old `kind` -> the reader that types its rows."""


def type_v1(kind: str, summary: str, data: Data) -> Record:
    """The typed record of one schema-1 row; `Legacy` when it cannot be typed faithfully."""
    reader = READERS.get(kind)
    try:
        record = reader(summary, data) if reader is not None else None
    except (KeyError, TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        record = None
    if record is None or record.summary != summary:
        return Legacy(old_kind=kind, text=summary, data=dict(data))
    return record
