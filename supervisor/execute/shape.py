"""A command as a shape: fixed words and patterns. What an action or a collector declares it
would run (`privileged=`), so the sudoers file can be generated from the rules in force and
`doctor` can ask sudo about each command without running it.

A `Shape` renders two ways: `sudoers_command(path)` is its sudoers Cmnd (`/usr/bin/systemctl
restart vllm-ds4-head.service`, or, when a word is a pattern, sudo's regular expression form
`/usr/bin/docker ^exec vllm_ds4 cat /workspace/a[.]sh$`, sudo >= 1.9.10), and `example()` is
one command of that shape, for `sudo -n -l -- COMMAND...`. `matches(argv)` says whether a
command the executor is about to run fits it (the specs hold every action to its declaration).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

#: Where sudo finds each program on the fleet's Linux hosts (Debian, Ubuntu, DGX OS: merged
#: /usr). Sudoers needs absolute paths; sudo also accepts another path to the same file.
PROGRAMS = {
    "cat": "/usr/bin/cat",
    "cp": "/usr/bin/cp",
    "docker": "/usr/bin/docker",
    "grep": "/usr/bin/grep",
    "head": "/usr/bin/head",
    "install": "/usr/bin/install",
    "journalctl": "/usr/bin/journalctl",
    "kill": "/usr/bin/kill",
    "launchctl": "/bin/launchctl",
    "lsof": "/usr/sbin/lsof",
    "python3": "/usr/bin/python3",
    "rm": "/usr/bin/rm",
    "sed": "/usr/bin/sed",
    "sh": "/usr/bin/sh",
    "ss": "/usr/bin/ss",
    "stat": "/usr/bin/stat",
    "systemctl": "/usr/bin/systemctl",
    "tail": "/usr/bin/tail",
    "test": "/usr/bin/test",
}

#: Characters of an extended regular expression that stand for something else, and those
#: sudoers itself reads specially inside a command's arguments. A backslash before any of them
#: means the character itself to both (checked with visudo and sudo 1.9.13).
_SPECIAL = frozenset(".[]{}()\\*+?^$|" + ',:="#!')


def ere_literal(text: str) -> str:
    """`text` as sudoers' extended regular expression matching exactly it (`a.b` -> `a\\.b`)."""
    return "".join("\\" + char if char in _SPECIAL else char for char in text)


@dataclass(frozen=True)
class Pattern:
    """A word (or several: `regex` may hold spaces) that varies: a pid, a line range."""

    regex: str  #: an extended regular expression, without anchors
    example: str  #: one value it matches, for `sudo -l`


Word = str | Pattern


@dataclass(frozen=True, kw_only=True)
class Shape:
    """One command as run with `sudo -n`: `argv[0]` is the program's name (see `PROGRAMS`)."""

    argv: tuple[Word, ...]

    @property
    def program(self) -> str:
        first = self.argv[0]
        assert isinstance(first, str), "a shape starts with the program's name"
        return first

    @property
    def fixed(self) -> bool:
        return all(isinstance(word, str) and _plain(word) for word in self.argv[1:])

    def example(self) -> tuple[str, ...]:
        return tuple(w if isinstance(w, str) else w.example for w in self.argv)

    def regex(self) -> str:
        """The arguments as one anchored extended regular expression."""
        words = [w.regex if isinstance(w, Pattern) else ere_literal(w) for w in self.argv[1:]]
        return "^" + " ".join(words) + "$"

    def sudoers_command(self, path: str | None = None) -> str:
        """The sudoers Cmnd for this shape (`path`: the program's absolute path)."""
        where = path or PROGRAMS.get(self.program, self.program)
        if len(self.argv) == 1:
            return f'{where} ""'
        if self.fixed:
            return f"{where} " + " ".join(str(w) for w in self.argv[1:])
        return f"{where} {self.regex()}"

    def matches(self, argv: Sequence[str]) -> bool:
        """Whether a concrete command (program name first) has this shape."""
        if not argv or argv[0] != self.program:
            return False
        return re.fullmatch(self.regex(), " ".join(argv[1:])) is not None

    def line(self) -> str:
        """The example as a shell line (`systemctl restart vllm-x.service`)."""
        return shlex.join(self.example())


def _plain(word: str) -> bool:
    """A word sudoers takes literally (no space, no character it reads specially)."""
    return bool(word) and not any(c.isspace() or c in _SPECIAL for c in word)


def fixed(*argv: str) -> Shape:
    """A shape without patterns."""
    return Shape(argv=tuple(argv))


PID = Pattern(regex="[1-9][0-9]*", example="2147483647")
