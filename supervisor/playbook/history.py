"""Past diagnoses as the timeline keeps them, ready to be evaluated again: `rules replay` runs a
playbook over them, `rules draft` writes a rule and a fixture from one.

A *round* is one `diagnosis` entry of an incident with what it was made from: the `evidence`
entries written just before it (each collector run, its facts or why it has none), the failed
probe that started it and the unit event systemd had sent (the last of each before it). Its
evidence stands in for the collectors: an evidence item the round did not gather is missing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from supervisor.core.events import ProbeOutcome, ProbeResult, Tier, UnitSignal
from supervisor.playbook.evidence.base import (
    CollectedEvidence,
    Collector,
    CollectorParams,
    FactValue,
    Scope,
)
from supervisor.playbook.matching import Gather
from supervisor.playbook.model import EvidenceItem
from supervisor.record.store.records import TimelineRow
from supervisor.record.timeline.base import JSONValue
from supervisor.record.timeline.parts import ProbeSample
from supervisor.record.timeline.repair import Diagnosis
from supervisor.record.timeline.repair import Evidence as EvidenceRecord
from supervisor.record.timeline.state import Probe, Transition
from supervisor.record.timeline.unit import UnitHeard

NOT_GATHERED = "not gathered in this diagnosis"
DOWN_EVENTS = frozenset({"failed", "exited", "crash_loop", "stopped"})
"""The unit events that were judged (and then reach the next diagnosis as `event.*`)."""


@dataclass(frozen=True, kw_only=True)
class Round:
    """One past diagnosis of an incident and what it was made from."""

    incident_id: int
    at: datetime
    endpoint: str
    state: str
    decided: str | None  #: the rule that matched then (None: none did)
    evidence: tuple[EvidenceRecord, ...] = ()
    trigger: ProbeSample | None = None  #: the last failed probe before it
    event: UnitHeard | None = None  #: the last unit death systemd reported before it

    def probe_result(self) -> ProbeResult | None:
        """The trigger as the matcher takes it (`probe.*` facts)."""
        sample = self.trigger
        if sample is None:
            return None
        return ProbeResult(
            endpoint=self.endpoint,
            tier=Tier(sample.tier),
            check=sample.check,
            outcome=ProbeOutcome(sample.outcome),
            reason=sample.reason,
            at=sample.at,
            latency_s=sample.latency_s,
        )

    def unit_signal(self) -> UnitSignal | None:
        """The unit event as the matcher takes it (`event.*` facts, in its unit's scope)."""
        heard = self.event
        if heard is None:
            return None
        return UnitSignal(
            endpoint=self.endpoint,
            host=heard.host,
            unit=heard.unit,
            kind=heard.event,
            down=True,
            line=heard.line,
            message=heard.message,
            at=self.at,
            lines=heard.lines,
            result=heard.result or "",
            exit_status=heard.exit_status,
            n_restarts=heard.n_restarts,
            source=heard.source,
        )

    def facts_of(self, scope: str, shared: Collection[str] = ()) -> dict[str, dict[str, FactValue]]:
        """Evidence id -> facts gathered in `scope` (a unit's label), those that gave facts.
        A run of a `shared` collector (one that needs no host, as `progress`: run once for the
        endpoint, recorded under its first scope) counts in every scope."""
        return {
            record.evidence_id: {name: fact_value(v) for name, v in record.facts.items()}
            for record in self.evidence
            if (record.scope == scope or record.collector in shared) and not record.error
        }


def rounds_of(incident_id: int, rows: Sequence[TimelineRow]) -> list[Round]:
    """Every diagnosis of one incident's timeline (rows in append order), with its evidence."""
    rounds: list[Round] = []
    evidence: list[EvidenceRecord] = []
    trigger: ProbeSample | None = None
    event: UnitHeard | None = None
    for row in rows:
        if row.type not in _READ:
            continue
        record = row.record
        if isinstance(record, EvidenceRecord):
            evidence.append(record)
        elif isinstance(record, Diagnosis):
            rounds.append(
                Round(
                    incident_id=incident_id,
                    at=row.at,
                    endpoint=record.endpoint,
                    state=record.state,
                    decided=record.rule,
                    evidence=tuple(evidence),
                    trigger=trigger,
                    event=event,
                )
            )
            evidence = []
        elif isinstance(record, UnitHeard):
            if record.event in DOWN_EVENTS and record.judged:
                event = record
        else:
            sample = _failed_probe(record)
            if sample is not None:
                trigger = sample
    return rounds


_READ = frozenset({EvidenceRecord.TAG, Diagnosis.TAG, UnitHeard.TAG, Probe.TAG, Transition.TAG})


def _failed_probe(record: object) -> ProbeSample | None:
    if isinstance(record, Probe):
        sample: ProbeSample | None = record.sample
    elif isinstance(record, Transition):
        sample = record.probe
    else:
        return None
    if sample is None or sample.outcome == ProbeOutcome.OK:
        return None
    return sample


def fact_value(value: JSONValue) -> FactValue:
    """A stored fact as the matcher reads it (lists as tuples)."""
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str | int | float | bool))
    if isinstance(value, dict):
        return None
    return value


def stored_gather(round_: Round, missing: set[str]) -> Gather:
    """Evidence from the round's records in place of the collectors. A record that kept its
    params answers only the same params; an older one (no params kept) answers its own
    evidence id, or any item of a collector that takes no params. What the round did not
    gather is missing (its id is added to `missing`); a collector that does not apply to the
    scope answers why, as the live diagnosis does."""

    async def gather(
        item: EvidenceItem, collector: Collector[Any], scope: Scope, params: CollectorParams
    ) -> CollectedEvidence:
        why = collector.applies(scope, params)
        if why:  # never run where it does not apply: not missing, as the live diagnosis says
            return CollectedEvidence(collector=collector.name, error=why)
        found = find_record(round_.evidence, item.id, collector, scope.label, params)
        if found is None:
            missing.add(item.id)
            return CollectedEvidence(collector=collector.name, error=NOT_GATHERED)
        if found.error:
            return CollectedEvidence(collector=collector.name, error=found.error)
        facts = {name: fact_value(value) for name, value in found.facts.items()}
        return CollectedEvidence(collector=collector.name, facts=facts)

    return gather


def find_record(
    records: Sequence[EvidenceRecord],
    evidence_id: str,
    collector: Collector[Any],
    scope: str,
    params: CollectorParams,
) -> EvidenceRecord | None:
    """The stored run that answers this evidence item in this scope, if there is one (a
    collector that needs no host ran once for the endpoint: its run answers every scope)."""
    wanted: Mapping[str, object] = params.model_dump(mode="json")
    older: list[EvidenceRecord] = []
    for record in records:
        if record.collector != collector.name:
            continue
        if collector.needs_host and record.scope != scope:
            continue
        if record.params is not None:
            if dict(record.params) == wanted:
                return record
            continue
        older.append(record)
    for record in older:
        if record.evidence_id == evidence_id:
            return record
    if older and not collector.params.model_fields:
        return older[0]
    return None
