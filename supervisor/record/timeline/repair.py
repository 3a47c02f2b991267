"""What a repair found and did: evidence, the diagnosis, the attempt, its steps, the
verification, and the escalation when a person is needed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from supervisor.core.durations import format_duration
from supervisor.core.payload import Maybe
from supervisor.record.timeline.base import EntryKind, JSONValue, Record, register
from supervisor.record.timeline.parts import CommandRun, UnitLeft


@register
@dataclass(frozen=True, kw_only=True)
class Evidence(Record):
    """One collector run before a diagnosis: its facts, or why it has none."""

    TAG = "evidence"
    KIND = EntryKind.EVIDENCE
    evidence_id: str
    collector: str
    scope: str  #: `vllm-ds4-head.service@spark1`, or the endpoint name
    error: str = ""
    facts: Mapping[str, JSONValue] = field(default_factory=dict)
    commands: tuple[CommandRun, ...] = ()
    #: the params the collector ran with (placeholders filled); None in entries written before
    #: they were kept. `rules replay` reads a run again only for the same params.
    params: Maybe[Mapping[str, JSONValue]] = None

    @property
    def summary(self) -> str:
        status = self.error or f"{len(self.facts)} facts"
        return f"{self.collector} ({self.evidence_id}) on {self.scope}: {status}"


@register
@dataclass(frozen=True, kw_only=True)
class Settled(Record):
    """Before a diagnosis: systemd (or launchd) was about to restart a unit, and the diagnosis
    waited for that restart's outcome (`running`, `failed again`, `stopped`, `no outcome`,
    `unreadable`) to read the latest attempt, not the last death. Or (`waited_for: exit`) the
    probe said the engine died, and the diagnosis waited for the server to exit (`exited`,
    `still running`, `unreadable`)."""

    TAG = "settled"
    KIND = EntryKind.EVIDENCE
    scope: str  #: `vllm-qwen.service@spark1`
    host: str
    unit: str
    outcome: str
    before: str  #: how the unit looked when the wait began: `signal 9, activating/auto-restart`
    after: str  #: how it looked when the wait ended: `status=127, activating/auto-restart`
    waited_s: float
    bound_s: float  #: the most it would have waited (RestartSec + start timeout + settle)
    waited_for: str = "restart"  #: `restart`, or `exit` (a server whose engine died)

    @property
    def summary(self) -> str:
        return (
            f"waited {self.waited_s:.1f}s (of up to {self.bound_s:.1f}s) for the "
            f"{self.waited_for} of {self.scope}: {self.outcome}: {self.after} "
            f"(before: {self.before})"
        )


@register
@dataclass(frozen=True, kw_only=True)
class Diagnosis(Record):
    """The verdict of the playbook: the rule that matched (None: none did), where, on which
    facts, and every rule tried, in `lines`."""

    TAG = "diagnosis"
    KIND = EntryKind.DIAGNOSIS
    endpoint: str
    state: str
    rule: Maybe[str] = None
    title: str = ""  #: the matched rule's title
    scopes: tuple[str, ...] = ()  #: where it matched
    facts: Mapping[str, Mapping[str, JSONValue]] = field(default_factory=dict)  #: scope -> facts
    lines: tuple[str, ...] = ()  #: every rule tried and why, for people

    @property
    def summary(self) -> str:
        if self.rule is None:
            return f"{self.endpoint} ({self.state}): no rule matched"
        return f"{self.endpoint} ({self.state}): {self.rule} matched on {', '.join(self.scopes)}"

    @property
    def cause(self) -> str:
        """What an incident's cause becomes once a rule matched: `rule-id: its title`."""
        if self.rule is None:
            return ""
        return f"{self.rule}: {self.title}" if self.title else self.rule


@register
@dataclass(frozen=True, kw_only=True)
class AttemptStarted(Record):
    """A repair attempt began (it counts against the budgets from now)."""

    TAG = "attempt_started"
    KIND = EntryKind.ATTEMPT
    attempt: int
    rule: str
    actor: Maybe[str] = None  #: the person who asked for it (a /restart); None: automatic

    @property
    def summary(self) -> str:
        by = f" by {self.actor}" if self.actor else ""
        return f"attempt {self.attempt} ({self.rule}) started{by}"


INTERRUPTED = "interrupted"


@register
@dataclass(frozen=True, kw_only=True)
class AttemptFinished(Record):
    """A repair attempt ended: `healed`, `restarted`, `failed: ...`, `not verified within ...`,
    or `interrupted`, and why (`the daemon stopped`, `deposed: b leads with epoch 3`)."""

    TAG = "attempt_finished"
    KIND = EntryKind.ATTEMPT
    attempt: int
    rule: str
    outcome: str
    why: str = ""  #: why it was cut (an interrupted attempt's; '' before issue 24)

    @property
    def summary(self) -> str:
        if self.outcome == INTERRUPTED:
            why = self.why or "the daemon stopped"
            cut = f"{why} while it ran" if why == "the daemon stopped" else why
            return (
                f"attempt {self.attempt} ({self.rule}) was interrupted: {cut}; its steps are not "
                "resumed"
            )
        return f"attempt {self.attempt} ({self.rule}) finished: {self.outcome}"


@register
@dataclass(frozen=True, kw_only=True)
class StepStarted(Record):
    """A step of a rule on one target is about to run: written before it runs, so a step cut
    off (the daemon stopped, deposed) still has its entry, its outcome unknown."""

    TAG = "step_started"
    KIND = EntryKind.ATTEMPT  #: the attempt's progress; `step` (an action) says how it went
    index: int  #: 0-based position in the rule
    action: str
    target: str

    @property
    def summary(self) -> str:
        return f"step {self.index + 1} {self.action} on {self.target}: started"


@register
@dataclass(frozen=True, kw_only=True)
class StepRan(Record):
    """One step of a rule on one target: ok, failed, or only planned (a dry run)."""

    TAG = "step"
    KIND = EntryKind.ACTION
    index: int  #: 0-based position in the rule
    action: str
    target: str
    ok: bool
    planned: bool = False
    result: str = ""  #: the action's own account, e.g. "ran touch /x on forge"
    needs_person: str = ""
    commands: tuple[CommandRun, ...] = ()

    @property
    def verdict(self) -> str:
        return "planned" if self.planned else ("ok" if self.ok else "failed")

    @property
    def done(self) -> bool:
        """It ran and passed (not a plan)."""
        return self.ok and not self.planned

    @property
    def summary(self) -> str:
        where = f"{self.action} on {self.target}"
        return f"step {self.index + 1} {where}: {self.verdict}: {self.result}"


@register
@dataclass(frozen=True, kw_only=True)
class UnitsLeft(Record):
    """What a repair that stopped at a failed step left the endpoint's units as: every unit
    that ran when the repair began and no longer did was started again, and a real completion
    was awaited (`verified`), before anyone was called."""

    TAG = "units_left"
    KIND = EntryKind.ACTION
    attempt: int
    rule: str
    units: tuple[UnitLeft, ...]
    #: a real completion passed after the start (None: no unit needed starting)
    verified: Maybe[bool] = None
    error: str = ""  #: the start that failed, if one did

    @property
    def started(self) -> tuple[UnitLeft, ...]:
        return tuple(unit for unit in self.units if unit.started)

    @property
    def restored(self) -> str:
        """For the person called next: `vllm.service@spark1 was started again and serves`, or
        '' when no unit needed starting."""
        names = ", ".join(f"{unit.unit}@{unit.host}" for unit in self.started)
        if not names:
            return ""
        if self.error:
            return f"starting {names} again failed: {self.error}"
        serves = "serves" if self.verified else "does not serve yet"
        return f"{names} {'was' if len(self.started) == 1 else 'were'} started again and {serves}"

    @property
    def summary(self) -> str:
        head = f"attempt {self.attempt} ({self.rule}) stopped; units left: "
        said = head + "; ".join(unit.line for unit in self.units)
        if self.error:
            return f"{said}; starting again failed: {self.error}"
        if self.verified is None:
            return said
        return said + ("; it serves again" if self.verified else "; it does not serve yet")


@register
@dataclass(frozen=True, kw_only=True)
class Verification(Record):
    """Whether a real completion passed within `within_s` after the repair's steps."""

    TAG = "verification"
    KIND = EntryKind.VERIFICATION
    rule: str
    ok: bool
    within_s: float
    ttft_s: Maybe[float] = None  #: the passing probe's figures, when it passed
    tok_s: Maybe[float] = None

    @property
    def summary(self) -> str:
        if self.ok:
            return f"verified: {self.rule} healed it"
        return f"{self.rule}: not verified within {format_duration(self.within_s)}"


@register
@dataclass(frozen=True, kw_only=True)
class Escalation(Record):
    """A person is needed (or, in a dry run, would be): why, for which rule, which runbook."""

    TAG = "escalation"
    KIND = EntryKind.DECISION
    why: str
    rule: Maybe[str] = None
    runbook: Maybe[str] = None  #: the rule's runbook path
    dry_run: bool = False

    @property
    def note(self) -> str:
        """The reason with its runbook: `budget spent: ... (runbook: runbooks/x.md)`."""
        return self.why + (f" (runbook: {self.runbook})" if self.runbook else "")

    @property
    def summary(self) -> str:
        return f"{'dry run: would escalate' if self.dry_run else 'escalated'}: {self.note}"
