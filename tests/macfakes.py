"""Stand-ins for macOS's `launchctl`, `lsof`, `stat -f`, `memory_pressure`, `vm_stat` and
`sysctl` for tests on Linux: small scripts put first on PATH, answering in the shapes recorded
under tests/data/evidence/macos/. The launchd job's state lives in files of one folder
(`loaded`, `pid`, and `calls` with every launchctl call); `lsof` reports the job's pid as the
listener of the port in `port` (nothing when there is no `port` file).

Only what the specs need: these are not the lab's stand-ins (those start and stop a real
mlx_lm-shaped server)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data" / "evidence" / "macos"

LAUNCHCTL = textwrap.dedent(
    """\
    #!/bin/bash
    state=$FLEET_TEST_LAUNCHD
    echo "$*" >> "$state/calls"
    case "$1" in
      print)
        if [ ! -e "$state/loaded" ]; then
          echo 'Bad request.' >&2
          echo "Could not find service \\"${2##*/}\\" in domain for user gui: 501" >&2
          exit 113
        fi
        pid=$(cat "$state/pid" 2>/dev/null || echo 0)
        printf '%s = {\\n\\tstate = running\\n\\tpid = %s\\n\\truns = 1\\n' "$2" "$pid"
        printf '\\tstderr path = %s\\n}\\n' "$state/err.log"
        ;;
      bootstrap) touch "$state/loaded" ;;
      bootout) [ -e "$state/loaded" ] || { echo 'Boot-out failed: 3: No such process' >&2; exit 3; }
               rm "$state/loaded" ;;
      kickstart) [ -e "$state/loaded" ] || {
                   echo "Could not find service \\"${!###*/}\\" in domain for user gui: 501" >&2
                   exit 113; } ;;
      *) echo "unexpected: $*" >&2; exit 64 ;;
    esac
    """
)
LSOF = textwrap.dedent(
    """\
    #!/bin/bash
    state=$FLEET_TEST_LAUNCHD
    [ -e "$state/port" ] || exit 1
    echo 'COMMAND   PID USER   FD   TYPE             DEVICE SIZE/OFF NODE NAME'
    printf 'Python  %s milo    7u  IPv4 0x8f1c2b0d5e3a7c41      0t0  TCP *:%s (LISTEN)\\n' \\
      "$(cat "$state/pid")" "$(cat "$state/port")"
    """
)
STAT = textwrap.dedent(
    """\
    #!/bin/bash
    # BSD `stat -f %m -- PATH` (mtime, seconds) through GNU stat
    [ "$1" = -f ] && [ "$2" = %m ] || { echo "unexpected: $*" >&2; exit 64; }
    shift 2
    exec /usr/bin/stat -c %Y "$@"
    """
)
SYSCTL = '#!/bin/bash\n[ "$*" = "-n kern.memorystatus_vm_pressure_level" ] && echo 1\n'


def _cat(name: str) -> str:
    return f"#!/bin/bash\ncat {DATA / name}\n"


@dataclass
class MacTools:
    """The stand-ins' folder (`bin`, first on PATH) and the job's state folder."""

    bin: Path
    state: Path

    def calls(self) -> list[str]:
        path = self.state / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def job(self, pid: int, *, port: int | None = None) -> None:
        """A loaded job running `pid`, listening on `port`."""
        (self.state / "loaded").touch()
        (self.state / "pid").write_text(str(pid))
        if port is not None:
            (self.state / "port").write_text(str(port))

    def log(self, text: str) -> None:
        (self.state / "err.log").write_text(text)


def mac_tools(folder: Path) -> MacTools:
    """Write the stand-ins under `folder`; put `.bin` first on PATH and set
    `FLEET_TEST_LAUNCHD` to `.state` where they run."""
    scripts = {
        "launchctl": LAUNCHCTL,
        "lsof": LSOF,
        "stat": STAT,
        "sysctl": SYSCTL,
        "memory_pressure": _cat("memory-pressure-Q-m3ultra.txt"),
        "vm_stat": _cat("vm-stat-m3ultra.txt"),
    }
    tools = MacTools(bin=folder / "bin", state=folder / "launchd")
    tools.bin.mkdir(parents=True)
    tools.state.mkdir()
    for name, text in scripts.items():
        script = tools.bin / name
        script.write_text(text)
        script.chmod(0o755)
    return tools
