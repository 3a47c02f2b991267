"""Collectors that read a file on the host or inside the unit's container: `grep_count`,
`path_exists`, `file_text`.

Paths and patterns are separate arguments after `--`, never shell text. Inside a container the
command runs through `supervisor.execute.containers.in_container` (with root, for docker).
A missing file is a fact (`exists: false`), not an error; a container that is not running is an
error (docker says so on stderr, where the command itself would stay quiet).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from supervisor.execute.base import CommandResult
from supervisor.execute.shape import Shape
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    CollectorParams,
    FactValue,
    Scope,
)
from supervisor.playbook.evidence.declare import (
    collector,
    failed,
    failure,
    found,
    read_shape,
    run_read,
)

MISSING = "No such file or directory"
PathText = Annotated[str, Field(strict=True, min_length=1)]
Flag = Annotated[bool, Field(strict=True)]


class GrepCountParams(CollectorParams):
    path: PathText
    pattern: Annotated[str, Field(strict=True, min_length=1)]
    in_container: Flag = False


class PathParams(CollectorParams):
    path: PathText
    in_container: Flag = False


class FileTextParams(CollectorParams):
    path: PathText
    in_container: Flag = False
    max_bytes: Annotated[int, Field(strict=True, ge=1, le=256 * 1024)] = 65536


def _quiet_exit(result: CommandResult, status: int) -> bool:
    """Exited with `status` and said nothing on stderr (the command's own answer, not docker's
    or sudo's complaint)."""
    return not result.error and result.exit_status == status and not result.stderr.strip()


def _missing(result: CommandResult, status: int) -> bool:
    return not result.error and result.exit_status == status and MISSING in result.stderr


def grep_facts(result: CommandResult) -> dict[str, FactValue] | None:
    """`grep -c` -> count and exists; None when its answer means something went wrong."""
    if _missing(result, 2):
        return {"count": 0, "exists": False}
    text = result.stdout.strip()
    if (result.ok or _quiet_exit(result, 1)) and text.isascii() and text.isdigit():
        return {"count": int(text), "exists": True}
    return None


def _grep_privileged(scope: Scope, params: GrepCountParams) -> tuple[Shape, ...]:
    if not params.in_container:
        return ()
    argv = ("grep", "-c", "-F", "-e", params.pattern, "--", params.path)
    return read_shape(scope, *argv, inside=True)


def _exists_privileged(scope: Scope, params: PathParams) -> tuple[Shape, ...]:
    return read_shape(scope, "test", "-e", params.path, inside=True) if params.in_container else ()


def _text_privileged(scope: Scope, params: FileTextParams) -> tuple[Shape, ...]:
    if not params.in_container:
        return ()
    argv = ("head", "-c", str(params.max_bytes), "--", params.path)
    return read_shape(scope, *argv, inside=True)


@collector(
    "grep_count",
    params=GrepCountParams,
    doc="lines of a file holding a fixed string: `grep -c -F -e PATTERN -- PATH` (host or "
    "container)",
    facts={
        "count": "how many lines hold the pattern (0 when none, or when the file is missing)",
        "exists": "whether the file exists",
    },
    privileged=_grep_privileged,
)
async def grep_count(ctx: CollectContext, params: GrepCountParams) -> CollectedEvidence:
    argv = ["grep", "-c", "-F", "-e", params.pattern, "--", params.path]
    result = await run_read(ctx, argv, inside=params.in_container)
    facts = grep_facts(result)
    if facts is None:
        return failed(failure("grep", result), result)
    return found(facts, result)


def exists_fact(result: CommandResult) -> dict[str, FactValue] | None:
    """`test -e` -> exists; None when its answer means something went wrong."""
    if result.ok:
        return {"exists": True}
    if _quiet_exit(result, 1):
        return {"exists": False}
    return None


@collector(
    "path_exists",
    params=PathParams,
    doc="whether a path exists: `test -e PATH` (host or container)",
    facts={"exists": "whether the path exists (a file, a folder, anything)"},
    privileged=_exists_privileged,
)
async def path_exists(ctx: CollectContext, params: PathParams) -> CollectedEvidence:
    result = await run_read(ctx, ["test", "-e", params.path], inside=params.in_container)
    facts = exists_fact(result)
    if facts is None:
        return failed(failure("test", result), result)
    return found(facts, result)


def text_facts(result: CommandResult) -> dict[str, FactValue] | None:
    """`head -c` -> text and exists; None when its answer means something went wrong."""
    if result.ok:
        return {"text": result.stdout, "exists": True}
    if _missing(result, 1):
        return {"text": "", "exists": False}
    return None


@collector(
    "file_text",
    params=FileTextParams,
    doc="the start of a file: `head -c MAX_BYTES -- PATH` (host or container)",
    facts={
        "text": "the file's first `max_bytes` bytes ('' when it is missing)",
        "exists": "whether the file exists",
    },
    privileged=_text_privileged,
)
async def file_text(ctx: CollectContext, params: FileTextParams) -> CollectedEvidence:
    argv = ["head", "-c", str(params.max_bytes), "--", params.path]
    result = await run_read(ctx, argv, inside=params.in_container)
    facts = text_facts(result)
    if facts is None:
        return failed(failure("head", result), result)
    return found(facts, result)
