"""What the rules in force would run as root, per host, without running anything.

For every rule that can act (not `manual`), every endpoint it applies to (its kinds and
endpoints; any state), every scope of that endpoint: each evidence item's collector and each
step's action declares the commands it would run with `sudo -n` (`privileged=`), with the
params filled from the scope's built-in facts (`{unit.container}`, `{unit.known_good}`). A step
whose params need facts only evidence gives (`{status.exec_start_script}`) cannot be known in
advance: it is listed as `unknown`, never granted. The daemon's own journal streams (one
`journalctl --follow` per systemd host) and `doctor`'s own reads are needs too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint, Host
from supervisor.execute.shape import Pattern, Shape, Word, ere_literal
from supervisor.hear.streams.journal import FIELDS
from supervisor.playbook.actions.base import Action, ActionScope, Target
from supervisor.playbook.actions.declare import StopSteps
from supervisor.playbook.evidence.base import Collector, Scope
from supervisor.playbook.facts import Facts
from supervisor.playbook.model import Mode, Rule
from supervisor.playbook.params import ParamsError, resolve_params
from supervisor.playbook.scopes import builtin_facts, scopes_of

#: Stands in for a fact only evidence gives (`{status.exec_start_script}`) while params are
#: filled ahead of time; a command word holding it becomes a pattern (see `_widen`).
EVIDENCE_VALUE = "/fleet-supervisor-evidence-value"
STREAMS = "event streams"
DOCTOR = "doctor"


@dataclass(frozen=True, kw_only=True)
class Need:
    """One command some part of the supervisor runs as root on `host`."""

    host: Host
    shape: Shape
    who: str  #: `rule eaddrinuse-29501`, `event streams`, `doctor`
    what: str  #: `kill_processes`, `journal`, ...
    endpoint: str = ""
    rule: str = ""  #: the rule's id, when a rule needs it


@dataclass(frozen=True, kw_only=True)
class UngrantedStep:
    """A step whose commands depend on evidence: not granted; `doctor` warns about it."""

    rule: str
    endpoint: str
    what: str
    why: str


@dataclass(frozen=True, kw_only=True)
class Needs:
    needs: tuple[Need, ...]
    unknown: tuple[UngrantedStep, ...]

    def on(self, host: str) -> tuple[Need, ...]:
        return tuple(need for need in self.needs if need.host.name == host)

    def for_rule(self, rule: str, endpoint: str) -> tuple[Need, ...]:
        return tuple(n for n in self.needs if n.rule == rule and n.endpoint == endpoint)


#: What runs as root on a launchd host (a Mac): launchctl, and kill for a LaunchDaemon's pid.
#: The other actions' commands are Linux's (drop_caches, ss, docker): a rule whose evidence is
#: systemd's never matches there, so they are not needed.
LAUNCHD_PROGRAMS = frozenset({"launchctl", "kill"})


def fits(host: Host, shape: Shape) -> bool:
    return host.service_manager != "launchd" or shape.program in LAUNCHD_PROGRAMS


def applies(rule: Rule, endpoint: Endpoint) -> bool:
    """Whether `rule` covers `endpoint` in some state (its kinds and endpoints)."""
    scope = rule.applies_to
    kinds_ok = scope.kinds is None or endpoint.kind in scope.kinds
    return kinds_ok and (scope.endpoints is None or endpoint.name in scope.endpoints)


def rule_needs(
    rule: Rule,
    endpoint: Endpoint,
    config: FleetConfig,
    *,
    actions: Mapping[str, Action[Any]],
    collectors: Mapping[str, Collector[Any]],
) -> tuple[list[Need], list[UngrantedStep]]:
    """What `rule` would run as root for `endpoint` (its evidence, then its steps)."""
    who = f"rule {rule.id}"
    scopes = [
        (s, Facts(values=builtin_facts(s, state="down", trigger=None)))
        for s in scopes_of(endpoint, config)
    ]
    found: list[Need] = []
    unknown: list[UngrantedStep] = []

    def need(host: Host, shape: Shape, what: str) -> Need:
        return Need(
            host=host, shape=shape, who=who, what=what, endpoint=endpoint.name, rule=rule.id
        )

    def ungranted(what: str, why: str) -> None:
        unknown.append(UngrantedStep(rule=rule.id, endpoint=endpoint.name, what=what, why=why))

    for item in rule.evidence:
        collector = collectors[item.collect]
        for scope, facts in scopes:
            try:
                params = _resolve(collector.params, item.params, facts, rule)
            except ParamsError as exc:
                ungranted(item.collect, str(exc))
                continue
            if scope.host is None:
                continue
            for shape in collector.privileged(scope, params):
                widened = _widen(shape, scope)
                if widened is None:
                    why = (
                        f"reads a path only evidence names in {scope.label}: "
                        "set units[].known_good (its folder is where it may read)"
                    )
                    ungranted(item.collect, why)
                    continue
                found.append(need(scope.host, widened, item.collect))
    if rule.mode is Mode.MANUAL:
        return found, unknown
    units = tuple((config.hosts[u.host], u) for u in endpoint.units if u.host in config.hosts)
    for step in rule.actions:
        action = actions[step.action]
        for scope, facts in _targets(step.on or action.target, scopes):
            try:
                params = _resolve(action.params, step.params, facts, rule)
            except ParamsError as exc:
                ungranted(step.action, str(exc))
                continue
            plan = ActionScope(endpoint=endpoint, host=scope.host, unit=scope.unit, units=units)
            try:
                privileged = action.privileged(plan, params)
            except StopSteps as exc:  # no unit, no container: it says why
                ungranted(step.action, str(exc))
                continue
            found.extend(
                need(host, shape, step.action) for host, shape in privileged if fits(host, shape)
            )
    return found, unknown


M = TypeVar("M", bound=BaseModel)


def _resolve(model: type[M], raw: Mapping[str, object], facts: Facts, rule: Rule) -> M:
    """`resolve_params`, with every fact of the rule's own evidence standing in as
    `EVIDENCE_VALUE` (a missing built-in fact still raises: the rule cannot act here)."""
    evidence = {item.id for item in rule.evidence}
    values = dict(facts.values)
    for _ in range(8):
        try:
            return resolve_params(model, raw, Facts(values=values))
        except ParamsError as exc:
            evidence_id, _, fact = exc.missing.partition(".")
            if not fact or evidence_id not in evidence:
                raise
            values[exc.missing] = EVIDENCE_VALUE
    return resolve_params(model, raw, Facts(values=values))


def _widen(shape: Shape, scope: Scope) -> Shape | None:
    """`shape` with each word holding `EVIDENCE_VALUE` as a pattern: a file in the folder of
    the unit's known-good script (the launch scripts live there); None when there is none."""
    if not any(isinstance(w, str) and EVIDENCE_VALUE in w for w in shape.argv):
        return shape
    good = scope.unit.known_good if scope.unit is not None else None
    if not good or not good.startswith("/") or " " in good:
        return None
    folder = ere_literal(good.rsplit("/", 1)[0]) + "/[^ /]+"
    words: list[Word] = []
    for word in shape.argv:
        if isinstance(word, str) and EVIDENCE_VALUE in word:
            before, _, after = word.partition(EVIDENCE_VALUE)
            regex = ere_literal(before) + folder + ere_literal(after)
            words.append(Pattern(regex=regex, example=word.replace(EVIDENCE_VALUE, good)))
        else:
            words.append(word)
    return Shape(argv=tuple(words))


def _targets(target: Target, scopes: Sequence[tuple[Scope, Facts]]) -> list[tuple[Scope, Facts]]:
    """The calls a step makes on `target` when every scope matched (the widest case)."""
    if target is Target.UNIT:
        return [(s, f) for s, f in scopes if s.unit is not None]
    if target in (Target.HOST, Target.HOSTS):
        seen: dict[str, tuple[Scope, Facts]] = {}
        for scope, facts in scopes:
            if scope.host is not None:
                seen.setdefault(
                    scope.host.name,
                    (Scope(endpoint=scope.endpoint, host=scope.host, unit=None), facts),
                )
        return list(seen.values())
    first_scope, first_facts = scopes[0]
    hosts = {s.host.name: s.host for s, _ in scopes if s.host is not None}
    only = next(iter(hosts.values())) if len(hosts) == 1 else None
    return [(Scope(endpoint=first_scope.endpoint, host=only, unit=None), first_facts)]


def stream_needs(config: FleetConfig) -> list[Need]:
    """The event streams' `journalctl` on each systemd host with units (as root: the journal of
    system units is root's unless the user is in `systemd-journal`)."""
    found: list[Need] = []
    for host in config.hosts.values():
        if host.service_manager != "systemd":
            continue
        units = sorted(
            {u.unit for e in config.endpoints.values() for u in e.units if u.host == host.name}
        )
        if not units:
            continue
        found.append(Need(host=host, shape=head_shape(), who=STREAMS, what="journalctl"))
        found.append(Need(host=host, shape=follow_shape(units), who=STREAMS, what="journalctl"))
    return found


def head_shape() -> Shape:
    return Shape(
        argv=(
            "journalctl",
            "--no-pager",
            "--quiet",
            "--lines=1",
            "--output=json",
            "--output-fields=__CURSOR",
        )
    )


def follow_shape(units: Sequence[str]) -> Shape:
    start = Pattern(regex="--(lines\\=0|cursor\\=[^ ]+)", example="--lines=0")
    named = "(" + "|".join(ere_literal(u) for u in units) + ")"
    unit_args = Pattern(
        regex=f"--unit\\={named}( --unit\\={named})*",
        example=" ".join(f"--unit={u}" for u in units),
    )
    return Shape(
        argv=(
            "journalctl",
            "--follow",
            "--no-pager",
            "--quiet",
            "--output=json",
            f"--output-fields={','.join(FIELDS)}",
            start,
            unit_args,
        )
    )


def doctor_needs(config: FleetConfig) -> list[Need]:
    """`doctor`'s own reads as root: inside each unit's container, whether the ExecStart script
    and the known-good script exist (`docker exec C test -e PATH`) and the container's state."""
    found: list[Need] = []
    for endpoint in config.endpoints.values():
        for unit in endpoint.units:
            host = config.hosts.get(unit.host)
            if host is None or host.service_manager != "systemd" or not unit.container:
                continue
            found.append(
                Need(
                    host=host,
                    shape=Shape(
                        argv=("docker", "inspect", "--format", "{{.State.Status}}", unit.container)
                    ),
                    who=DOCTOR,
                    what="container",
                    endpoint=endpoint.name,
                )
            )
            if not unit.known_good or not unit.known_good.startswith("/"):
                continue
            folder = unit.known_good.rsplit("/", 1)[0]
            path = Pattern(regex=f"{ere_literal(folder)}/[^ /]+", example=unit.known_good)
            found.append(
                Need(
                    host=host,
                    shape=Shape(argv=("docker", "exec", unit.container, "test", "-e", path)),
                    who=DOCTOR,
                    what="execstart",
                    endpoint=endpoint.name,
                )
            )
    return found


def fleet_needs(
    config: FleetConfig,
    rules: Iterable[Rule],
    *,
    actions: Mapping[str, Action[Any]],
    collectors: Mapping[str, Collector[Any]],
) -> Needs:
    """Everything the supervisor would run as root on the fleet's hosts."""
    found: list[Need] = []
    unknown: list[UngrantedStep] = []
    for rule in rules:
        for endpoint in config.endpoints.values():
            if not applies(rule, endpoint):
                continue
            needs, unknowns = rule_needs(
                rule, endpoint, config, actions=actions, collectors=collectors
            )
            found.extend(needs)
            unknown.extend(unknowns)
    found.extend(stream_needs(config))
    found.extend(doctor_needs(config))
    return Needs(needs=tuple(found), unknown=tuple(unknown))
