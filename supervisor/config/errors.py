"""What a broken config file produces: located issues, all of them, in one exception."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config file.

    `file` is the path as the user gave it, `line` is 1-based (None when unknown), `path` is the
    dotted field path such as `endpoints.ds4.units[0].host` (empty when the issue is about the
    whole file) and `message` is a plain sentence fragment such as `required`.
    """

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        what = f"{self.path}: {self.message}" if self.path else self.message
        return f"{where}: {what}"


def _sort_key(issue: ConfigIssue) -> int:
    return 0 if issue.line is None else issue.line


class ConfigError(Exception):
    """A config file that cannot be used; `issues` holds every problem found, sorted by line."""

    def __init__(self, issues: Iterable[ConfigIssue]) -> None:
        unique = list(dict.fromkeys(issues))
        if not unique:
            raise ValueError("a ConfigError needs at least one issue")
        self.issues: tuple[ConfigIssue, ...] = tuple(sorted(unique, key=_sort_key))
        super().__init__("\n".join(str(issue) for issue in self.issues))

    def __str__(self) -> str:
        return "\n".join(str(issue) for issue in self.issues)


Loc = tuple[object, ...]
"""Where a value sits in the document: mapping keys and list indexes, outermost first."""


def format_path(loc: Loc) -> str:
    """`('endpoints', 'ds4', 'units', 0, 'host')` -> `endpoints.ds4.units[0].host`."""
    text = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        else:
            name = str(part).replace("\n", "\\n")
            text += f".{name}" if text else name
    return text
