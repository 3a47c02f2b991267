"""The `processes` collector: processes whose command line matches a rule's pattern.

`ps -ww -eo pid=,user=,args=` lists every process (`-ww`: whole command lines, never cut to
`$COLUMNS`); the pattern (a Python regex) is applied here, so rule text never reaches a shell or
a `pgrep`. A vLLM worker renames itself: its command line reads `VLLM::Worker_TP0` or
`VLLM::EngineCore`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, field_validator

from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    CollectorParams,
    FactValue,
)
from supervisor.playbook.evidence.declare import collector, failed, failure, found, run_read

PS_ARGV = ("ps", "-ww", "-eo", "pid=,user=,args=")


class ProcessesParams(CollectorParams):
    pattern: Annotated[str, Field(strict=True, min_length=1)]
    user: Annotated[str, Field(strict=True, min_length=1)] | None = None

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


@dataclass(frozen=True, kw_only=True)
class Process:
    pid: int
    user: str  #: as ps prints it (procps cuts long names to 7 characters and a `+`)
    args: str


def parse_ps(text: str) -> list[Process]:
    """`ps -ww -eo pid=,user=,args=` lines -> processes (ps's own line left out)."""
    listed: list[Process] = []
    for line in text.splitlines():
        words = line.split(None, 2)
        if len(words) < 3 or not (words[0].isascii() and words[0].isdigit()):
            continue
        args = words[2].strip()
        if args == " ".join(PS_ARGV):
            continue
        listed.append(Process(pid=int(words[0]), user=words[1], args=args))
    return listed


def same_user(listed: str, wanted: str) -> bool:
    """`listed` (from ps) names `wanted`, also when ps cut a long name (`averyve+`)."""
    if listed == wanted:
        return True
    return listed.endswith("+") and len(wanted) > len(listed) and wanted.startswith(listed[:-1])


def select_processes(processes: list[Process], pattern: str, user: str | None) -> list[Process]:
    """The processes whose command line matches `pattern` (`re.search`), of `user` if given."""
    regex = re.compile(pattern)
    return [
        process
        for process in processes
        if regex.search(process.args) and (user is None or same_user(process.user, user))
    ]


def process_facts(processes: list[Process]) -> dict[str, FactValue]:
    return {
        "count": len(processes),
        "pids": tuple(process.pid for process in processes),
        "users": tuple(process.user for process in processes),
        "commands": tuple(process.args for process in processes),
    }


@collector(
    "processes",
    params=ProcessesParams,
    doc="processes whose command line matches a regex: `ps -ww -eo pid=,user=,args=` (no root)",
    facts={
        "count": "how many processes match",
        "pids": "their pids",
        "users": "their users, in the order of `pids`",
        "commands": "their command lines, in the order of `pids`",
    },
)
async def processes(ctx: CollectContext, params: ProcessesParams) -> CollectedEvidence:
    result = await run_read(ctx, list(PS_ARGV))
    if not result.ok:
        return failed(failure("ps", result), result)
    chosen = select_processes(parse_ps(result.stdout), params.pattern, params.user)
    return found(process_facts(chosen), result)
