"""Commands inside a unit's container: the ONE place that builds `docker exec` lines.

Collectors and actions that run something "inside the container" call `in_container`; nothing
else may spell `docker exec`. The lab swaps the strategy here (a directory tree standing in for a
container) without touching any caller.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: docker's own rule for container names (`[a-zA-Z0-9][a-zA-Z0-9_.-]+`); a name can never be
#: read as a flag of `docker exec`.
CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")

#: Commands inside a container need root: docker's socket belongs to root.
CONTAINER_SUDO = True


class ContainerNameError(ValueError):
    """`in_container` was given a name docker would not accept (or would read as a flag)."""


def in_container(container: str, argv: Sequence[str]) -> list[str]:
    """`argv` run inside `container`: `["docker", "exec", CONTAINER, *argv]`.

    Raises `ContainerNameError` for a name that is not a docker container name
    (`not a container name: '-u root'`), so rule text can never become a docker flag.
    """
    if not CONTAINER_NAME.fullmatch(container):
        raise ContainerNameError(f"not a container name: {container!r}")
    if not argv:
        raise ValueError("in_container needs a command to run")
    return ["docker", "exec", container, *argv]
