"""One incident's timeline for the page: each typed record read by its fields (a registry from
record type to what the page shows), never the summary parsed back. A record with no entry here
shows its stored summary."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from supervisor.record.store.records import TimelineRow
from supervisor.record.timeline.base import Record
from supervisor.record.timeline.control import Notification
from supervisor.record.timeline.parts import CommandRun, ProbeSample
from supervisor.record.timeline.repair import Diagnosis, Evidence, StepRan, UnitsLeft, Verification
from supervisor.record.timeline.state import Probe, Transition


@dataclass(frozen=True, kw_only=True)
class StepCommand:
    host: str
    command: str
    exit_status: str  #: the exit code, or what stopped it
    duration: str
    output_tail: str


@dataclass(frozen=True, kw_only=True)
class Item:
    """What the page shows for one entry: a headline, facts as (name, value) pairs, commands."""

    row: TimelineRow
    headline: str
    tone: str = ""
    facts: tuple[tuple[str, str], ...] = ()
    commands: tuple[StepCommand, ...] = ()
    lines: tuple[str, ...] = field(default_factory=tuple)


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _commands(runs: tuple[CommandRun, ...]) -> tuple[StepCommand, ...]:
    return tuple(
        StepCommand(
            host=run.host,
            command=run.command,
            exit_status=(
                "dry run"
                if run.dry_run
                else (str(run.exit_status) if run.exit_status is not None else run.error or "-")
            ),
            duration=f"{run.duration_s:.2f}s",
            output_tail=run.output_tail,
        )
        for run in runs
    )


def _sample_facts(sample: ProbeSample) -> tuple[tuple[str, str], ...]:
    pairs = [
        ("tier", sample.tier),
        ("check", sample.check),
        ("outcome", sample.outcome),
        ("reason", sample.reason),
        ("latency", f"{sample.latency_s:.3f}s"),
        ("HTTP", "" if sample.http_status is None else str(sample.http_status)),
        ("TTFT", "" if sample.ttft_s is None else f"{sample.ttft_s:.3f}s"),
        ("tok/s", "" if sample.tok_s is None else f"{sample.tok_s:.1f}"),
    ]
    return tuple((k, v) for k, v in pairs if v)


def _by(r: Transition) -> str | None:
    """Who caused it (the person who set or ended a silence, asked for a restart), and how."""
    if r.actor is None:
        return None
    return f"{r.actor.who} ({r.actor.via})" if r.actor.via is not None else r.actor.who


def _transition(row: TimelineRow, r: Transition) -> Item:
    facts = [("trigger", r.trigger.value)]
    facts += [(k, v) for k, v in (("rule", r.rule), ("by", _by(r)), ("why", r.why)) if v]
    if r.extra.get("silence"):
        facts.append(("silence", f"#{r.extra['silence']} on {r.extra.get('target', '?')}"))
    if r.until is not None:
        facts.append(("until", r.until.isoformat(timespec="seconds")))
    if r.probe is not None:
        facts += _sample_facts(r.probe)
    return Item(
        row=row,
        headline=f"{r.source} → {r.dest}: {r.note}",
        tone="transition",
        facts=tuple(facts),
    )


def _probe(row: TimelineRow, r: Probe) -> Item:
    note = f": {r.note}" if r.note else ""
    return Item(row=row, headline=f"probe {r.sample.outcome}{note}", facts=_sample_facts(r.sample))


def _evidence(row: TimelineRow, r: Evidence) -> Item:
    facts = tuple((k, _value(v)) for k, v in sorted(r.facts.items()))
    if r.error:
        facts = (("error", r.error), *facts)
    return Item(
        row=row,
        headline=f"evidence {r.evidence_id} ({r.collector})",
        facts=facts,
        commands=_commands(r.commands),
    )


def _diagnosis(row: TimelineRow, r: Diagnosis) -> Item:
    facts = tuple(
        (f"{scope}: {name}", _value(value))
        for scope, matched in r.facts.items()
        for name, value in sorted(matched.items())
    )
    headline = (
        f"diagnosis: {r.rule} — {r.title}" if r.rule else f"diagnosis: no rule matched ({r.state})"
    )
    return Item(row=row, headline=headline, tone="diagnosis", facts=facts, lines=r.lines)


def _step(row: TimelineRow, r: StepRan) -> Item:
    facts = (("result", r.result),) if r.result else ()
    if r.needs_person:
        facts = (*facts, ("needs a person", r.needs_person))
    return Item(
        row=row,
        headline=f"step {r.index + 1} {r.action} on {r.target}: {r.verdict}",
        tone="step-" + r.verdict,
        facts=facts,
        commands=_commands(r.commands),
    )


def _verification(row: TimelineRow, r: Verification) -> Item:
    facts = [("within", f"{r.within_s:g}s")]
    if r.ttft_s is not None:
        facts.append(("TTFT", f"{r.ttft_s:.3f}s"))
    if r.tok_s is not None:
        facts.append(("tok/s", f"{r.tok_s:.1f}"))
    verdict = "passed" if r.ok else "failed"
    return Item(row=row, headline=f"verification {verdict}: {r.rule}", facts=tuple(facts))


def _units_left(row: TimelineRow, r: UnitsLeft) -> Item:
    facts: list[tuple[str, str]] = []
    for unit in r.units:
        said = f"found {unit.found or '?'}, after the steps {unit.after_steps or '?'}"
        if unit.started:
            said += f", started again: {unit.left or '?'}"
        if unit.pid:
            said += f" (pid {unit.pid})"
        facts.append((f"{unit.unit}@{unit.host}", said + (f"; {unit.error}" if unit.error else "")))
    if r.verified is not None:
        facts.append(("serves again", "yes" if r.verified else "no"))
    if r.error:
        facts.append(("start failed", r.error))
    headline = f"units left by attempt {r.attempt} ({r.rule})"
    return Item(row=row, headline=headline, tone="step-failed", facts=tuple(facts))


def _notification(row: TimelineRow, r: Notification) -> Item:
    return Item(
        row=row,
        headline=f"message sent: {r.message}",
        tone="message",
        facts=(("channel", r.channel), ("chat", str(r.chat_id))),
    )


Reader = Callable[[TimelineRow, Any], Item]
READERS: Mapping[type[Record], Reader] = {
    Transition: _transition,
    Probe: _probe,
    Evidence: _evidence,
    Diagnosis: _diagnosis,
    StepRan: _step,
    Verification: _verification,
    UnitsLeft: _units_left,
    Notification: _notification,
}


def item(row: TimelineRow) -> Item:
    record = row.record
    reader = READERS.get(type(record))
    return reader(row, record) if reader else Item(row=row, headline=row.summary)
