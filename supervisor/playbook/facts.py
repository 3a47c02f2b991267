"""The facts of one scope: built-in ones, then each evidence item's, named `EVIDENCE_ID.FACT`.

A fact that is not there is *missing*; when its evidence item failed, `errors` says why
(`journal: cannot connect to spark1 ...`), so explanations can say more than "missing".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from supervisor.playbook.evidence.base import FactValue
from supervisor.playbook.operators import MISSING, Actual


@dataclass(frozen=True)
class Facts:
    values: Mapping[str, FactValue] = field(default_factory=dict)  #: "status.result" -> value
    errors: Mapping[str, str] = field(default_factory=dict)  #: "status" -> why it has no facts

    def get(self, name: str) -> Actual:
        return self.values.get(name, MISSING)

    def why_missing(self, name: str) -> str:
        """Why `name` is missing: its evidence's error, else empty."""
        return self.errors.get(name.split(".", 1)[0], "")

    def with_evidence(
        self, evidence_id: str, facts: Mapping[str, FactValue], error: str = ""
    ) -> Facts:
        """These facts plus one evidence item's (and its error, when it failed)."""
        values = {**self.values, **{f"{evidence_id}.{k}": v for k, v in facts.items()}}
        errors = {**self.errors, evidence_id: error} if error else dict(self.errors)
        return Facts(values=values, errors=errors)


def fact_text(value: FactValue) -> str:
    """A fact as text inside a placeholder: `true`, `127`, `a b` for a list, '' for null."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return " ".join(fact_text(item) for item in value)
    return str(value)
