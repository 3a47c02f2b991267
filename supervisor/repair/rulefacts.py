"""What a matched rule says for one repair: the scopes it matched in, the message of a manual
rule's `ask_person` step, and the head of its runbook for the escalation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from supervisor.playbook.facts import Facts
from supervisor.playbook.loader import Playbook
from supervisor.playbook.model import Rule
from supervisor.playbook.results import DiagnosisResult
from supervisor.playbook.templating import PlaceholderError, fill_params


def matched_scopes(diagnosis: DiagnosisResult, rule_id: str) -> list[tuple[Any, Facts]]:
    for evaluation in diagnosis.evaluations:
        if evaluation.rule_id == rule_id:
            return [(r.scope, r.facts) for r in evaluation.scopes]
    return []


def ask_text(rule: Rule, matched: list[tuple[Any, Facts]]) -> str:
    """The message of a manual rule's `ask_person` step, filled from the first matched scope."""
    facts = matched[0][1] if matched else Facts()
    for step in rule.actions:
        if step.action == "ask_person":
            try:
                filled = fill_params(dict(step.params), facts)
            except PlaceholderError:
                return str(step.params.get("message", ""))
            if isinstance(filled, dict):
                return str(filled.get("message", ""))
    return ""


def runbook_head(playbook: Playbook, rule: Rule | None, lines: int = 3) -> str:
    if rule is None or not rule.runbook or playbook.folder is None:
        return ""
    path = Path(playbook.folder).parent / rule.runbook
    try:
        return "\n".join(path.read_text(encoding="utf-8").splitlines()[:lines])
    except OSError:
        return ""
