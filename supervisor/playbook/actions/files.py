"""Files on a host or inside a unit's container: remove a block that got pasted twice.

The file is read with `cat`; the removal is done in place by `sed -i.bak -e FIRST,LASTd ...`
(line numbers computed here, so no rule text reaches sed's script, and nothing needs stdin,
which `docker exec` does not pass on), which also leaves `PATH.bak`. The result is read back
and compared with the plan, then compiled; on any mismatch or compile failure the backup is
copied back.
"""

from __future__ import annotations

from pydantic import Field

from supervisor.config.fields import Flag
from supervisor.execute.shape import Pattern, Shape, Word
from supervisor.playbook.actions.base import (
    ActionContext,
    ActionOutcome,
    ActionParams,
    ActionScope,
    Privileged,
    Target,
)
from supervisor.playbook.actions.declare import action
from supervisor.playbook.actions.dedupe import DedupeError, DedupePlan, lines_with, plan_dedupe
from supervisor.playbook.actions.steps import Steps, absolute, container_of, host_of, inside, why

MAX_CHARS = 200 * 1024  #: executors keep the last 256 KiB of output: larger files are refused


class DedupeParams(ActionParams):
    path: str = Field(description="the file (absolute; inside the container when in_container)")
    marker: str = Field(min_length=1, description="fixed text on a line of the repeated block")
    expected: int = Field(strict=True, ge=1, description="how many lines should hold the marker")
    in_container: Flag = Field(default=False, description="the file is inside the unit's container")
    compile_check: Flag = Field(default=True, description="`python3 -m py_compile` the result")


def _what(plan: DedupePlan, marker: str) -> str:
    noun = "copy" if plan.copies == 1 else "copies"
    lines = "line" if plan.lines_removed == 1 else "lines"
    return (
        f"{plan.copies} repeated {noun} ({plan.lines_removed} {lines}) of the block with {marker!r}"
    )


#: `-e FIRST,LASTd` once or more: the line ranges sed deletes (numbers computed here).
SED_RANGES = Pattern(regex="-e [0-9]+\\,[0-9]+d( -e [0-9]+\\,[0-9]+d)*", example="-e 12,15d")


def _dedupe_privileged(scope: ActionScope, params: DedupeParams) -> tuple[Privileged, ...]:
    host = host_of(scope)
    path = absolute(params.path, "path")
    container = container_of(scope) if params.in_container else None

    def shape(*words: Word) -> Privileged:
        argv: tuple[Word, ...] = ("docker", "exec", container, *words) if container else words
        return host, Shape(argv=argv)

    found = [
        shape("cat", path),
        shape("sed", "-i.bak", SED_RANGES, path),
        shape("cp", "-p", f"{path}.bak", path),
    ]
    if params.compile_check:
        found.append(shape("python3", "-m", "py_compile", path))
    return tuple(found)


@action(
    "dedupe_block",
    params=DedupeParams,
    target=Target.UNIT,
    targets=frozenset({Target.UNIT, Target.HOST}),
    doc="remove repeated copies of the block holding a marker until its count is right; compile",
    privileged=_dedupe_privileged,
)
async def dedupe_block(ctx: ActionContext, params: DedupeParams) -> ActionOutcome:
    steps = Steps(ctx)
    host = host_of(ctx)
    path = absolute(params.path, "path")
    container = container_of(ctx) if params.in_container else None
    where = f"{path} in {container} on {host.name}" if container else f"{path} on {host.name}"

    def argv(*words: str) -> list[str]:
        return inside(container, words) if container else list(words)

    text = (await steps.must(host, argv("cat", path), sudo=True)).stdout
    if len(text) > MAX_CHARS:
        raise steps.refuse(f"{where} is larger than {MAX_CHARS // 1024} KiB: not editing it")
    try:
        plan = plan_dedupe(text, params.marker, params.expected)
    except DedupeError as exc:
        raise steps.refuse(f"{where} {exc}: not changing it") from None
    if not plan.copies:
        return steps.done(f"{where} has {lines_with(plan.before, params.marker)}: nothing to do")
    script = [arg for first, last in plan.ranges for arg in ("-e", f"{first},{last}d")]
    await steps.must(host, argv("sed", "-i.bak", *script, path), sudo=True, mutating=True)
    restore = argv("cp", "-p", f"{path}.bak", path)
    if not ctx.dry_run:
        back = await steps.must(host, argv("cat", path), sudo=True)
        if back.stdout != plan.text:
            await steps.must(host, restore, sudo=True, mutating=True)
            raise steps.refuse(f"{where} did not read back as planned: restored it from .bak")
    if params.compile_check:
        compiled = await steps.run(
            host, argv("python3", "-m", "py_compile", path), sudo=True, mutating=True
        )
        if not compiled.ok:
            await steps.must(host, restore, sudo=True, mutating=True)
            raise steps.refuse(
                f"{where} does not compile without {_what(plan, params.marker)}: "
                f"restored it from {path}.bak ({why(compiled, last=True)})"
            )
    removed = steps.said("removed", "would remove")
    return steps.done(
        f"{removed} {_what(plan, params.marker)} from {where}: "
        f"{plan.before} -> {plan.after} lines hold it (backup {path}.bak)"
    )
