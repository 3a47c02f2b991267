"""Containers in the lab: a directory tree, entered by a `/usr/bin/docker` stand-in.

No docker engine runs in the lab. Each lab host gets a `/usr/bin/docker` script (in its
overlay root, never on the machine) that implements `docker exec [-i] [-t] NAME CMD...` (and
`docker inspect --format FORMAT NAME`, which says `running` for any tree). The container
`NAME` is the tree `/var/lib/lab/containers/NAME`: the command runs in
a new mount namespace in which every path of the tree that the host lacks is bind-mounted over
the host's root (`/workspace`, `/usr/local/lib/python3.12/...`), then `exec`s `CMD` in place.
So `supervisor.execute.containers.in_container` stays exactly what it is for a real fleet, and
everything that says `docker exec` (units, drop-ins written by the playbook, evidence) really
runs.

What differs from docker, honestly: the command keeps the host's PID, network, users and every
host file the tree does not shadow (there is no image, no `/` of its own); it runs in place of
the `docker exec` process (systemd's main PID is the command itself, not a docker client); and
`docker restart`/`ps`/`logs` are not simulated (they exit 125 saying so). An unknown container
gives docker's own text: `Error response from daemon: No such container: NAME` (exit 1).
"""

from __future__ import annotations

from pathlib import Path

from fleet_lab.boot import INSIDE
from supervisor.execute.helpers import DROPIN, SIGNAL, SOURCES

DOCKER = f"""\
#!/bin/bash
# fleet lab: `docker exec NAME CMD...` over a directory tree (see lab/fleet_lab/containers.py).
set -euo pipefail
if [ "${{1:-}}" = inspect ] && [ "${{2:-}}" = --format ] && [ $# -eq 4 ]; then
  # `docker inspect --format {{{{.State.Status}}}} NAME`: a tree is a running container
  if [ -d "{INSIDE}/containers/$4" ]; then echo running; exit 0; fi
  echo "[]"
  echo "Error: No such object: $4" >&2
  exit 1
fi
if [ "${{1:-}}" != exec ]; then
  echo "lab docker: only 'docker exec NAME CMD...' is simulated, not '${{1:-}}'" >&2
  exit 125
fi
shift
while [[ "${{1:-}}" == -* ]]; do shift; done
NAME=${{1:-}}
if [ -z "$NAME" ] || [ $# -lt 2 ]; then
  echo '"docker exec" requires at least 2 arguments.' >&2
  exit 125
fi
shift
TREE={INSIDE}/containers/$NAME
if [ ! -d "$TREE" ]; then
  echo "Error response from daemon: No such container: $NAME" >&2
  exit 1
fi
exec unshare --mount --propagation private {INSIDE}/bin/enter "$TREE" "$@"
"""

ENTER = """\
#!/bin/bash
# fleet lab: inside a fresh mount namespace, lay the container tree $1 over the root, run $2...
set -euo pipefail
TREE=$1
shift
lay() {
  local entry target
  for entry in "$TREE$1"/* "$TREE$1"/.[!.]*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    target=${entry#"$TREE"}
    # recurse only into a host folder with content: an empty one is a mount point an earlier
    # exec made (mkdir below lands on the host), and recursing into it would end in a bind of
    # the file itself, which a rename (sed -i) cannot replace
    if [ -d "$entry" ] && [ -d "$target" ] && [ ! -L "$target" ] \\
      && [ -n "$(ls -A "$target")" ]; then
      lay "$target"
    elif [ -d "$entry" ]; then
      mkdir -p "$target"
      mount --bind "$entry" "$target"
    else
      [ -e "$target" ] || touch "$target"
      mount --bind "$entry" "$target"
    fi
  done
}
lay ""
cd /
exec "$@"
"""


def write_tools(folder: Path) -> None:
    """Write the host's `bin/docker`, `bin/enter` and the supervisor's signal helper; stage 2
    installs docker as /usr/bin/docker and the helpers where install.sh puts them."""
    bin_folder = folder / "bin"
    bin_folder.mkdir(parents=True, exist_ok=True)
    tools = {
        "docker": DOCKER,
        "enter": ENTER,
        "fleet-supervisor-signal": SOURCES[SIGNAL].read_text(),
        "fleet-supervisor-dropin": SOURCES[DROPIN].read_text(),
    }
    for name, text in tools.items():
        path = bin_folder / name
        path.write_text(text)
        path.chmod(0o755)


def write_tree(folder: Path, container: str, files: dict[str, str]) -> Path:
    """Create container `container` on the host in `folder`: `files` maps absolute paths inside
    the container to their text (`.sh` files are made executable). Returns the tree's root."""
    root = folder / "containers" / container
    for inside, text in files.items():
        path = root / inside.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if path.suffix == ".sh":
            path.chmod(0o755)
    root.mkdir(parents=True, exist_ok=True)
    return root
