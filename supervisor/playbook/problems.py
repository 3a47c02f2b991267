"""What is wrong with a rule file: located problems, said in plain words.

Every problem names the file, the line, the rule id (when known) and the field path, in the
config loader's style: `playbooks/ghost.yaml:12: rule 'ghost-execstart': when.all[1].op:
unknown operator 'equals' (operators: eq, ne, in, ...)`. Pydantic's errors are translated by
the config package's message table (`supervisor.config.messages`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from supervisor.config.errors import Loc, format_path
from supervisor.config.messages import describe, model_at, render_value
from supervisor.config.yamlsource import LineMap
from supervisor.playbook.templating import placeholders


class Level(StrEnum):
    ERROR = "error"  #: the rule is disabled
    WARNING = "warning"  #: the rule loads; a person should still fix this


@dataclass(frozen=True)
class RuleProblem:
    file: str
    line: int | None
    rule_id: str | None
    path: str  #: `when.all[1].op`; empty for the whole file
    message: str
    level: Level = Level.ERROR

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        rule = f" rule {self.rule_id!r}:" if self.rule_id else ""
        what = f"{self.path}: {self.message}" if self.path else self.message
        warning = "warning: " if self.level is Level.WARNING else ""
        return f"{where}:{rule} {warning}{what}"


@dataclass
class Problems:
    """Problems found so far in one rule file, each placed on its line."""

    file: str
    lines: LineMap
    rule_id: str | None = None
    found: list[RuleProblem] = field(default_factory=list)

    def at(self, loc: Loc, message: str, level: Level = Level.ERROR) -> None:
        """A problem with the value at `loc` (or, when missing, with what should hold it)."""
        line = self.lines.line_of(loc)
        self.found.append(
            RuleProblem(self.file, line, self.rule_id, format_path(loc), message, level)
        )

    def at_key(self, loc: Loc, message: str) -> None:
        """A problem with the key at `loc` itself (unknown, repeated)."""
        line = self.lines.key_line(loc)
        self.found.append(RuleProblem(self.file, line, self.rule_id, format_path(loc), message))

    def validation(self, exc: ValidationError, model: type[BaseModel], prefix: Loc) -> None:
        """Every error of validating the value at `prefix` as `model`."""
        for err in exc.errors(include_url=False):
            loc = prefix + tuple(err["loc"])
            if err["type"] == "extra_forbidden":
                self.at_key(loc, pydantic_error_text(err, model))
            else:
                self.at(loc, pydantic_error_text(err, model))

    @property
    def errors(self) -> list[RuleProblem]:
        return [problem for problem in self.found if problem.level is Level.ERROR]


def pydantic_error_text(err: ErrorDetails, model: type[BaseModel]) -> str:
    """One pydantic error in plain words; a placeholder where no text goes says so."""
    if err["type"] == "extra_forbidden":
        owner = model_at(model, tuple(err["loc"][:-1]))
        names = sorted(set(owner.model_fields) - {"source"}) if owner is not None else []
        return f"unknown key (expected one of: {', '.join(names)})" if names else "unknown key"
    if err["type"] == "enum":
        expected = str(err.get("ctx", {}).get("expected", "")).replace("'", "")
        message = f"expected one of {expected}, got {render_value(err['input'])}"
    else:
        message = describe(err, model)
    value = err["input"]
    text_error = err["type"].startswith("string_") or err["type"] == "extra_forbidden"
    if isinstance(value, str) and placeholders(value) and not text_error:
        message += " (placeholders only fill text fields)"
    return message


def first_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """`path: message` of the first error, for a run-time failure (params filled badly)."""
    err = exc.errors(include_url=False)[0]
    path = format_path(tuple(err["loc"]))
    message = pydantic_error_text(err, model)
    return f"{path}: {message}" if path else message
