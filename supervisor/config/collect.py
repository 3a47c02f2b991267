"""Collecting located issues while the loader validates one part of the file after another."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from supervisor.config.errors import ConfigIssue, Loc, format_path
from supervisor.config.messages import describe, render_value
from supervisor.config.yamlsource import LineMap

M = TypeVar("M", bound=BaseModel)


@dataclass
class IssueCollector:
    """Issues found so far in one file, each placed on its line through the `LineMap`."""

    file: str
    lines: LineMap
    found: list[ConfigIssue] = field(default_factory=list)
    bad_fields: set[Loc] = field(default_factory=set)
    """The `(section, name, field)` paths whose values failed their type checks."""

    def at(self, loc: Loc, message: str) -> None:
        """An issue about the value at `loc` (or, when it is missing, what should hold it)."""
        line = self.lines.line_of(loc)
        self.found.append(ConfigIssue(self.file, line, format_path(loc), message))

    def at_key(self, loc: Loc, message: str, *, path: str | None = None) -> None:
        """An issue about the key at `loc` itself (unknown, badly named)."""
        line = self.lines.key_line(loc)
        shown = format_path(loc) if path is None else path
        self.found.append(ConfigIssue(self.file, line, shown, message))

    def validate(
        self, model: type[M], data: object, prefix: Loc, fill: Mapping[str, object] | None = None
    ) -> tuple[M | None, M | None]:
        """Validate `data` found at `prefix` as `model`, recording every error.

        Returns the entry (None when invalid) and a best effort for the cross-checks: the entry
        validated again without its bad fields, required ones taken from `fill` (None when that
        fails too). The bad fields are added to `bad_fields`.
        """
        try:
            entry = model.model_validate(data)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
        else:
            return entry, entry
        for err in errors:
            loc = prefix + tuple(err["loc"])
            if loc[-1] == "[key]":  # a mapping's key (a header's name): said at that key
                key = loc[-2] if isinstance(loc[-2], str) else render_value(loc[-2])
                path = f"{format_path(loc[:-2])}.{key}"
                self.at_key(loc[:-1], describe(err, model), path=path)
            elif err["type"] == "extra_forbidden":
                self.at_key(loc, describe(err, model))
            else:
                self.at(loc, describe(err, model))
        bad = {err["loc"][0] for err in errors if err["loc"]}
        self.bad_fields.update((*prefix, name) for name in bad)
        if not bad or not isinstance(data, dict):
            return None, None
        kept = {k: v for k, v in data.items() if k not in bad}
        kept.update({k: v for k, v in (fill or {}).items() if k in bad})
        return None, quietly(model, kept)


def quietly(model: type[M], data: object) -> M | None:
    """`data` validated as `model`, or None: for best efforts whose errors are already reported."""
    try:
        return model.model_validate(data)
    except ValidationError:
        return None
