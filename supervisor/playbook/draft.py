"""`rules draft`: a rule, its fixture and a runbook stub written from one past diagnosis.

The rule applies to the incident's endpoint and state, sits just above the rule that matched
then (so it is tried first), asks a person first (`mode: confirm`) and takes the steps of the
rule that matched then as its starting point. Its conditions are pre-filled from the facts of
the unit that failed (the unit systemd reported, else the first whose status shows a failure):
the exit status and result systemd or launchd kept, and the telling line of its log; with the
busy guard when the progress was read. The fixture replays the facts of every unit as they
were gathered, and expects the new rule: a person edits the rule, then `rules test` and
`rules replay` say what the edit changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.core.timefmt import iso
from supervisor.playbook.evidence.base import FactValue
from supervisor.playbook.history import Round
from supervisor.playbook.loader import Playbook, parse_rule
from supervisor.playbook.model import EvidenceItem, Rule
from supervisor.playbook.problems import Level
from supervisor.playbook.registries import Collectors, actions_or_default

Leaf = dict[str, Any]
Telling = Callable[[str, Mapping[str, FactValue]], list[Leaf]]

TITLE_CHARS = 90


class DraftError(Exception):
    """Nothing to draft from (the message says why, in one line)."""


@dataclass(frozen=True, kw_only=True)
class RuleDraft:
    rule_id: str
    rule: str  #: the rule file's text
    fixture: str  #: the fixture file's text
    runbook: str  #: the runbook stub's text
    runbook_path: str  #: as the rule names it, e.g. `runbooks/ID.md`
    scope: str  #: the unit the conditions were taken from
    conditions: int  #: how many conditions were pre-filled (the busy guard included)


def _exit(field: str, ok: object) -> Callable[[str, Mapping[str, FactValue]], Leaf | None]:
    def leaf(evidence: str, facts: Mapping[str, FactValue]) -> Leaf | None:
        value = facts.get(field)
        if value is None or value == ok or value == "" or isinstance(value, tuple):
            return None
        return {"fact": f"{evidence}.{field}", "op": "eq", "value": value}

    return leaf


def _facts_of(*fields: Callable[[str, Mapping[str, FactValue]], Leaf | None]) -> Telling:
    def telling(evidence: str, facts: Mapping[str, FactValue]) -> list[Leaf]:
        return [leaf for f in fields if (leaf := f(evidence, facts)) is not None]

    return telling


def _log(evidence: str, facts: Mapping[str, FactValue]) -> list[Leaf]:
    text = facts.get("text")
    line = telling_line(text) if isinstance(text, str) else None
    if line is None:
        return []
    return [{"fact": f"{evidence}.text", "op": "contains", "value": line}]


TELLING: Mapping[str, Telling] = {
    "unit_status": _facts_of(_exit("exec_main_status", 0), _exit("result", "success")),
    "launchd_job": _facts_of(_exit("last_exit_code", 0), _exit("last_signal_number", 0)),
    "journal": _log,
    "launchd_log": _log,
}
"""Collector -> the conditions its facts pre-fill (what singles a failure out)."""

_FAILED = re.compile(
    r"error|exception|fatal|traceback|refused|denied|no such file|cannot|killed", re.I
)
_SYSTEMD = re.compile(r"^\S+\.(service|socket|scope): |^(Started|Starting|Stopped|Stopping) ")
_EXCEPTION = re.compile(r"\b[A-Z]\w*(Error|Exception)\b: .*")
_LOG_PREFIX = re.compile(
    r"^(\(\S+ pid=\d+\) )?([A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? \[[^\]]*\] )?"
)


def telling_line(text: str) -> str | None:
    """The last line of a log that says what failed (not systemd's own account), without the
    logger's prefix: from the exception's name on when it names one."""
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if not stripped or _SYSTEMD.search(stripped) or not _FAILED.search(stripped):
            continue
        found = _EXCEPTION.search(stripped)
        return (found.group(0) if found else _LOG_PREFIX.sub("", stripped)).strip()
    return None


def draft_rule(
    round_: Round,
    *,
    rule_id: str,
    opened: str,
    config: FleetConfig,
    playbook: Playbook,
    collectors: Collectors,
    alone: bool,
) -> RuleDraft:
    """The drafted files. `alone`: the fixture names the rule file (it is written outside the
    playbook folder) and gives only the facts the new rule gathers."""
    shared = frozenset(name for name, c in collectors.items() if not c.needs_host)
    endpoint = config.endpoints.get(round_.endpoint)
    if endpoint is None:
        raise DraftError(
            f"incident #{round_.incident_id}: endpoint {round_.endpoint!r} is not in the config"
        )
    scopes = _scope_labels(endpoint)
    target = _failed_scope(round_, scopes)
    facts = round_.facts_of(target, shared)
    collector_of = {r.evidence_id: r.collector for r in round_.evidence}
    leaves: list[Leaf] = []
    used: list[str] = []
    for evidence_id, found in facts.items():
        telling = TELLING.get(collector_of[evidence_id])
        if telling is None:
            continue
        found_leaves = telling(evidence_id, found)
        if found_leaves:
            leaves.extend(found_leaves)
            used.append(evidence_id)
    if not leaves:
        raise DraftError(
            f"incident #{round_.incident_id}: no exit status, result or log line in its "
            f"evidence singles it out (on {target})"
        )
    progress = next((r for r in round_.evidence if r.collector == "progress" and not r.error), None)
    if progress is not None:  # busy is not broken
        used.append(progress.evidence_id)
        busy = {"fact": f"{progress.evidence_id}.verdict", "op": "eq", "value": "busy"}
        leaves.insert(0, {"not": busy})
    decided = playbook.by_id.get(round_.decided) if round_.decided else None
    title = _title(endpoint.name, leaves)
    actions, steps_note = _steps(decided, endpoint, title)
    used.extend(_named(actions))  # the evidence the steps' placeholders read
    items = _evidence_items(used, round_, target, playbook)
    runbook = f"runbooks/{rule_id}.md"
    rule_text = _rule_text(
        round_,
        rule_id,
        title,
        opened,
        endpoint,
        items,
        leaves,
        decided,
        (actions, steps_note),
        runbook,
    )
    problems = parse_rule(
        rule_text,
        file=f"{rule_id}.yaml",
        base=Path("."),
        collectors=collectors,
        actions=actions_or_default(None),
    ).problems
    errors = [p for p in problems if p.level is Level.ERROR]
    if errors:
        raise DraftError(f"the drafted rule would be disabled: {errors[0]}")
    gathered = {item.id for item in items} if alone else _declared(playbook, items)
    fixture = _fixture_text(round_, rule_id, endpoint, config, scopes, gathered, shared, alone)
    return RuleDraft(
        rule_id=rule_id,
        rule=rule_text,
        fixture=fixture,
        runbook=_runbook_text(round_, rule_id, title, opened, target, leaves),
        runbook_path=runbook,
        scope=target,
        conditions=len(leaves),
    )


def _steps(
    decided: Rule | None, endpoint: Endpoint, title: str
) -> tuple[list[dict[str, Any]], str]:
    """The drafted rule's steps (those of the rule that matched then, else a plain restart, else
    a person) and what the rule's header says of them."""
    if decided is not None and decided.actions:
        steps = [s.model_dump(exclude_defaults=True, by_alias=True) for s in decided.actions]
        return steps, f"the steps of {decided.id}"
    if endpoint.units:
        return [{"action": "restart_units"}], "a plain restart of the endpoint's units"
    return [{"action": "ask_person", "params": {"message": title}}], "a person is asked"


def _named(document: object) -> list[str]:
    """The evidence ids the placeholders of `document` name (`{port.pids}` -> `port`)."""
    return re.findall(r"\{([a-z0-9_-]+)\.", str(document))


def _scope_labels(endpoint: Endpoint) -> list[str]:
    return [f"{u.unit}@{u.host}" for u in endpoint.units] or [endpoint.name]


def _failed_scope(round_: Round, scopes: Sequence[str]) -> str:
    """The unit systemd reported dead, else the first whose status shows a failure, else the
    first with evidence."""
    event = round_.event
    if event is not None and f"{event.unit}@{event.host}" in scopes:
        return f"{event.unit}@{event.host}"
    for scope in scopes:
        for record in round_.evidence:
            if record.scope == scope and record.collector in ("unit_status", "launchd_job"):
                result = record.facts.get("result")
                if result not in (None, "success") or record.facts.get("running") is False:
                    return scope
    for scope in scopes:
        if round_.facts_of(scope):
            return scope
    return scopes[0]


def _evidence_items(
    ids: Sequence[str], round_: Round, scope: str, playbook: Playbook
) -> list[EvidenceItem]:
    """The items that gather `ids` as the playbook's rules declare them (and the items their
    params name), in the order they were declared; else as the stored run says."""
    known: dict[str, EvidenceItem] = {}
    for rule in playbook.rules:
        for item in rule.evidence:
            known.setdefault(item.id, item)
    wanted: dict[str, None] = {}

    def want(evidence_id: str) -> None:
        item = known.get(evidence_id)
        if item is not None:
            for name in _named(item.params):
                if name in known and name != evidence_id:
                    want(name)
        wanted[evidence_id] = None

    for evidence_id in ids:
        if evidence_id in known or any(r.evidence_id == evidence_id for r in round_.evidence):
            want(evidence_id)
    items = []
    for evidence_id in wanted:
        if evidence_id in known:
            items.append(known[evidence_id])
        else:
            ran = [r for r in round_.evidence if r.evidence_id == evidence_id]
            record = next((r for r in ran if r.scope == scope), ran[0])
            params = dict(record.params or {})
            items.append(EvidenceItem(id=evidence_id, collect=record.collector, params=params))
    return items


def _declared(playbook: Playbook, items: Sequence[EvidenceItem]) -> set[str]:
    ids = {item.id for rule in playbook.rules for item in rule.evidence}
    return ids | {item.id for item in items}


def _title(endpoint: str, leaves: Sequence[Leaf]) -> str:
    said = [leaf for leaf in leaves if leaf.get("op") == "contains"]
    if said:
        what = str(said[0]["value"])
    else:
        shown = [
            f"{leaf['fact'].split('.', 1)[1]} {leaf['value']}" for leaf in leaves if "fact" in leaf
        ]
        what = ", ".join(shown)
    title = f"{endpoint}: {what}"
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 3] + "..."


class _Dumper(yaml.SafeDumper):
    """Leaf mappings on one line, text of several lines as a `|` block, nothing folded."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    block = "\n" in value and all(c.isprintable() for c in value.replace("\n", ""))
    style = "|" if block else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def _dump(document: object) -> str:
    return yaml.dump(
        document,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=None,
        width=1_000_000,
        allow_unicode=True,
    )


def _rule_text(
    round_: Round,
    rule_id: str,
    title: str,
    opened: str,
    endpoint: Endpoint,
    items: Sequence[EvidenceItem],
    leaves: Sequence[Leaf],
    decided: Rule | None,
    steps: tuple[list[dict[str, Any]], str],
    runbook: str,
) -> str:
    then = decided.id if decided else "no rule"
    priority = decided.priority + 1 if decided else 0
    actions, steps_note = steps
    document: dict[str, Any] = {
        "id": rule_id,
        "title": title,
        "severity": str(decided.severity) if decided else "warning",
        "applies_to": {"endpoints": [endpoint.name], "states": [round_.state]},
        "priority": priority,
        "evidence": [item.model_dump(exclude_defaults=True) for item in items],
        "when": {"all": list(leaves)},
        "actions": actions,
        "mode": "confirm",
        "runbook": runbook,
    }
    above = f"just above {then}, the rule that matched then" if decided else "0: no rule matched"
    head = [
        f"# Drafted by `fleet-supervisor rules draft {round_.incident_id}` from incident "
        f"#{round_.incident_id} ({endpoint.name}, opened {opened}),",
        f"# its diagnosis of {iso(round_.at)}, when {then} matched.",
        "# when: the facts that singled that incident out. Edit them to say what the fault is,",
        "#   not only how it looked once: `rules test` runs its fixture (tests/), `rules replay`",
        "#   the fleet's history.",
        f"# priority: {above}.",
        f"# actions: {steps_note}: make them the repair.",
        "# mode: confirm, a person is asked before each repair.",
    ]
    return "\n".join(head) + "\n" + _dump(document)


def _fixture_text(
    round_: Round,
    rule_id: str,
    endpoint: Endpoint,
    config: FleetConfig,
    scopes: Sequence[str],
    gathered: set[str],
    shared: Collection[str],
    alone: bool,
) -> str:
    case: dict[str, Any] = {
        "name": f"incident #{round_.incident_id}: {endpoint.name} {round_.state} "
        f"({iso(round_.at)})",
        "endpoint": {
            "name": endpoint.name,
            "kind": endpoint.kind,
            "state": round_.state,
            "url": endpoint.url,
        },
    }
    trigger = round_.trigger
    if trigger is not None:
        case["probe"] = {
            "check": trigger.check,
            "outcome": trigger.outcome,
            "reason": trigger.reason,
        }
    if endpoint.units:
        case["units"] = [u.model_dump(exclude_none=True) for u in endpoint.units]
        hosts = {}
        for unit in endpoint.units:
            host = config.hosts.get(unit.host)
            if host is not None:
                given = {"address": host.address, "local": host.local or None}
                hosts[unit.host] = {k: v for k, v in given.items() if v is not None}
        case["hosts"] = hosts
    facts = []
    for scope in scopes:
        per_unit = {
            evidence_id: {name: _plain(value) for name, value in found.items()}
            for evidence_id, found in round_.facts_of(scope, shared).items()
            if evidence_id in gathered
        }
        facts.append(per_unit)
    while facts and not facts[-1]:
        facts.pop()
    if facts:
        case["facts"] = facts
    case["expect"] = rule_id
    document: dict[str, Any] = {}
    if alone:
        document["rule_files"] = [f"../{rule_id}.yaml"]
    document["cases"] = [case]
    head = (
        f"# {rule_id}: the facts of incident #{round_.incident_id} per unit, in restart order, "
        f"as its\n# diagnosis of {iso(round_.at)} had them. Add the look-alikes the rule must "
        "not match\n# (expect: none) or must leave to another rule.\n"
    )
    return head + _dump(document)


def _plain(value: FactValue) -> object:
    return list(value) if isinstance(value, tuple) else value


def _runbook_text(
    round_: Round, rule_id: str, title: str, opened: str, scope: str, leaves: Sequence[Leaf]
) -> str:
    seen = [
        f"- `{leaf['fact']}` {leaf['op']} `{leaf['value']}`" for leaf in leaves if "fact" in leaf
    ]
    return "\n".join(
        [
            f"# {rule_id}: {title}",
            "",
            f"Drafted from incident #{round_.incident_id} ({round_.endpoint}, opened {opened}).",
            "Say here what the fault is, how to confirm it by hand, how to repair it, and whom",
            "to call when the repair does not help.",
            "",
            f"## What was seen on {scope}",
            "",
            *seen,
            "",
            "## Repair",
            "",
            "TODO",
            "",
        ]
    )


def write_draft(draft: RuleDraft, folder: Path) -> list[Path]:
    """Write the rule into `folder`, its fixture into `folder/tests`, the runbook stub beside
    the folder (`../runbooks`, unless one is there already); the paths written."""
    rule = folder / f"{draft.rule_id}.yaml"
    fixture = folder / "tests" / f"{draft.rule_id}.yaml"
    runbook = folder.parent / draft.runbook_path
    for path in (rule, fixture):
        if path.exists():
            raise DraftError(f"{path} already exists")
    written = []
    for path, text in ((rule, draft.rule), (fixture, draft.fixture), (runbook, draft.runbook)):
        if path == runbook and path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
