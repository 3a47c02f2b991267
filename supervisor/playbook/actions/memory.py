"""Memory on unified-memory boxes (GB10): drop the page cache and vLLM's leftover /dev/shm
segments, so a relaunch finds the memory that earlier model loads left cached."""

from __future__ import annotations

from pydantic import Field, field_validator

from supervisor.execute.shape import Pattern, Shape, ere_literal, fixed
from supervisor.playbook.actions.base import (
    ActionContext,
    ActionOutcome,
    ActionParams,
    ActionScope,
    Privileged,
    Target,
)
from supervisor.playbook.actions.declare import action
from supervisor.playbook.actions.steps import Steps, host_of

#: Lists the files the patterns ($1 ...) match, NUL-separated. IFS is empty so a pattern is
#: only globbed, never split; a pattern that matches nothing stays literal and fails `-e`.
LIST_SCRIPT = (
    'IFS=; for pattern in "$@"; do for f in $pattern; do '
    'if [ -e "$f" ] || [ -L "$f" ]; then printf "%s\\0" "$f"; fi; done; done'
)
#: Writes 3 (free page cache, dentries and inodes) into the drop_caches file ($1).
DROP_SCRIPT = 'echo 3 > "$1"'
#: vLLM's leftover shared-memory segments (they really live in /dev/shm).
SHM_GLOBS = ("/dev/shm/psm_*", "/dev/shm/sem.mp-*")  # noqa: S108
WILDCARDS = frozenset("*?[")
SHOWN = 5


def _check_glob(value: str) -> str:
    folder, _, name = value.rpartition("/")
    fixed = [ch for ch in name if ch not in WILDCARDS]
    if (
        not value.startswith("/")
        or ".." in value.split("/")
        or WILDCARDS & set(folder)
        or not fixed
    ):
        raise ValueError(
            "must be an absolute file pattern with wildcards only in its last part, "
            f"like /dev/shm/psm_*, got {value!r}"
        )
    return value


class PageCacheParams(ActionParams):
    drop_caches_path: str = Field(
        default="/proc/sys/vm/drop_caches", description="the file `3` is written into"
    )
    shm_globs: tuple[str, ...] = Field(
        default=SHM_GLOBS,
        description="shared-memory segments to remove (wildcards only in the last part)",
    )

    @field_validator("drop_caches_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value

    @field_validator("shm_globs")
    @classmethod
    def _globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_glob(glob) for glob in value)


def _files(found: list[str]) -> str:
    if not found:
        return "no shm segments"
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    noun = "segment" if len(found) == 1 else "segments"
    return f"{len(found)} shm {noun} ({', '.join(found[:SHOWN])}{more})"


def glob_regex(glob: str) -> str:
    """A file pattern (`/dev/shm/psm_*`) as sudoers' regex for one file name without spaces."""
    out = []
    for char in glob:
        if char == "*":
            out.append("[^ /]*")
        elif char == "?":
            out.append("[^ /]")
        else:
            out.append(ere_literal(char))
    return "".join(out)


def _page_cache_privileged(scope: ActionScope, params: PageCacheParams) -> tuple[Privileged, ...]:
    host = host_of(scope)
    found: list[Privileged] = [
        (host, fixed("sh", "-c", DROP_SCRIPT, "sh", params.drop_caches_path))
    ]
    if params.shm_globs:
        one = "(" + "|".join(glob_regex(g) for g in params.shm_globs) + ")"
        example = params.shm_globs[0].replace("*", "x").replace("?", "x")
        files = Pattern(regex=f"{one}( {one})*", example=example)
        found.append((host, Shape(argv=("rm", "-f", "--", files))))
    return tuple(found)


@action(
    "drop_page_cache",
    params=PageCacheParams,
    target=Target.HOSTS,
    targets=frozenset({Target.HOSTS, Target.HOST}),
    doc="sync, write 3 into /proc/sys/vm/drop_caches, remove vLLM's /dev/shm segments",
    privileged=_page_cache_privileged,
)
async def drop_page_cache(ctx: ActionContext, params: PageCacheParams) -> ActionOutcome:
    steps = Steps(ctx)
    host = host_of(ctx)
    found: list[str] = []
    if params.shm_globs:
        listing = await steps.must(host, ["sh", "-c", LIST_SCRIPT, "sh", *params.shm_globs])
        found = [name for name in listing.stdout.split("\0") if name]
    await steps.must(host, ["sync"], mutating=True)
    drop = ["sh", "-c", DROP_SCRIPT, "sh", params.drop_caches_path]
    await steps.must(host, drop, sudo=True, mutating=True)
    if found:
        await steps.must(host, ["rm", "-f", "--", *found], sudo=True, mutating=True)
    dropped = steps.said("dropped", "would drop")
    removed = steps.said("removed", "would remove")
    return steps.done(
        f"{dropped} the page cache on {host.name} ({params.drop_caches_path}) "
        f"and {removed} {_files(found)}"
    )
