"""What `launchctl print DOMAIN/LABEL` says about one launchd job, parsed; shared by the launchd
collectors and the launchd actions.

The shape parsed here is macOS's own (launchctl(1) documents the subcommand and says its output
"is NOT API in any sense"; the keys below have been stable from macOS 10.10 to 15). Sources of the
recorded outputs under `tests/data/evidence/macos/`:

- launchctl(1), https://keith.github.io/xcode-man-pages/launchctl.1.html (domains `system`,
  `user/<uid>`, `gui/<uid>`; `print`, `kickstart -k`, `bootstrap`, `bootout`, `kill`);
- a full capture of `launchctl print gui/501/com.dev.weekly-cache-cleanup` on macOS 15 in a public
  agent transcript (`path =`, `state = running`, `arguments = {` ... `}`, `stdout path =`,
  `stderr path =`, `runs = 2`, `pid = 16090`, `last terminating signal = Terminated: 15`, nested
  `resource coalition = {` blocks that also hold `state =`);
- public parsers and their fixtures: Homebrew's `brew services` (`last exit code = ([0-9]+)`,
  `pid = ([0-9]+)`), the `last exit code = (never exited)` of a running or never-started job and
  `last terminating signal = Killed: 9` replacing the exit line, `78: EX_CONFIG` annotated codes,
  and the not-found answer: exit 113, `Could not find service "x" in domain for user gui: 501`.

Only top-level keys (one tab deep) are read: nested blocks (coalitions, environment) repeat names
such as `state =` with other meanings. A job launchd does not know is a fact (`loaded: false`).
"""

from __future__ import annotations

import plistlib
import re
from dataclasses import dataclass
from xml.parsers.expat import ExpatError

from supervisor.config.supervised import UnitRef
from supervisor.playbook.evidence.base import FactValue

#: launchctl's exit status for "Could not find service ... in domain ..." (ESRCH-like)
NOT_FOUND_STATUS = 113
NOT_FOUND_TEXT = "Could not find service"
_NUMBER = re.compile(r"-?\d+")
SPAWNING_STATE = "xpcproxy"
#: states of a job whose process exists: `xpcproxy` is the moment launchd spawns it (a pid,
#: not yet the program's own image), seen during a `kickstart`
RUNNING_STATES = frozenset({"running", SPAWNING_STATE})
_SIGNAL = re.compile(r"(?P<name>.*?):\s*(?P<number>\d+)\s*$")


class NotLaunchdError(ValueError):
    """The unit is not a launchd job (no `domain`), or its label could be read as an option."""


def job_target(unit: UnitRef) -> str:
    """`gui/501/com.fleet.mlx-kimi`: the service target of launchctl's subcommands."""
    if unit.domain is None:
        raise NotLaunchdError(f"{unit.unit} is not a launchd job (its unit has no domain)")
    if unit.unit.startswith("-") or "/" in unit.unit or not unit.unit.strip():
        raise NotLaunchdError(f"not a launchd label: {unit.unit!r}")
    return f"{unit.domain}/{unit.unit}"


def print_argv(unit: UnitRef) -> list[str]:
    return ["launchctl", "print", job_target(unit)]


def is_not_found(exit_status: int | None, stderr: str) -> bool:
    """launchctl's answer for a label the domain does not hold."""
    return exit_status == NOT_FOUND_STATUS or NOT_FOUND_TEXT in stderr


@dataclass(frozen=True, kw_only=True)
class LaunchdJob:
    """The top-level keys of one `launchctl print` answer, and the `arguments` block."""

    keys: dict[str, str]
    arguments: tuple[str, ...]

    @property
    def pid(self) -> int:
        return _int(self.keys.get("pid", "")) or 0


def parse_print(text: str) -> LaunchdJob:
    """`launchctl print` output -> its top-level `key = value` pairs and program arguments."""
    keys: dict[str, str] = {}
    arguments: list[str] = []
    depth = 0
    block = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line == "}":
            depth = max(0, depth - 1)
            block = "" if depth <= 1 else block
            continue
        if depth == 2 and block == "arguments":
            arguments.append(line)
            continue
        key, sep, value = line.partition(" = ")
        if line.endswith("{"):
            depth += 1
            block = key.strip() if depth == 2 else block
            continue
        if depth == 1 and sep:
            keys.setdefault(key.strip(), value.strip())
    return LaunchdJob(keys=keys, arguments=tuple(arguments))


def _int(text: str) -> int | None:
    match = _NUMBER.match(text.strip())
    return int(match.group()) if match else None


def job_facts(job: LaunchdJob) -> dict[str, FactValue]:
    """The `launchd_job` facts of a job launchd knows."""
    keys = job.keys
    state = keys.get("state", "")
    facts: dict[str, FactValue] = {
        "loaded": True,
        "state": state,
        # `xpcproxy` with a pid: launchd is spawning it (a kickstart), the process exists
        "running": state in RUNNING_STATES and job.pid > 0,
        "spawning": state == SPAWNING_STATE,
        "pid": job.pid,
        "runs": _int(keys.get("runs", "")) or 0,
        "program": keys.get("program", ""),
        "arguments": " ".join(job.arguments),
        "stdout_path": keys.get("stdout path", ""),
        "stderr_path": keys.get("stderr path", ""),
        "plist_path": keys.get("path", ""),
    }
    code = keys.get("last exit code", "")
    signal = keys.get("last terminating signal", "")
    facts["never_exited"] = not signal and code in ("(never exited)", "")
    number = _int(code)
    if number is not None:
        facts["last_exit_code"] = number
    facts["last_signal"] = signal
    parsed = _SIGNAL.match(signal)
    if parsed:
        facts["last_signal_number"] = int(parsed["number"])
    facts["last_exit"] = last_exit_text(facts)
    return facts


def last_exit_text(facts: dict[str, FactValue]) -> str:
    """How the last run ended, in words for a message: `signal Killed: 9`, `exit 1`, `never
    exited`."""
    if facts.get("last_signal"):
        return f"signal {facts['last_signal']}"
    if "last_exit_code" in facts:
        return f"exit {facts['last_exit_code']}"
    return "never exited"


NOT_LOADED_FACTS: dict[str, FactValue] = {
    "loaded": False,
    "state": "",
    "running": False,
    "spawning": False,
    "pid": 0,
    "runs": 0,
    "never_exited": True,
    "last_signal": "",
    "last_exit": "not loaded",
    "program": "",
    "arguments": "",
    "stdout_path": "",
    "stderr_path": "",
    "plist_path": "",
}
"""The facts of a label the domain does not hold (booted out, never bootstrapped)."""


def plutil_argv(path: str) -> list[str]:
    """Any plist (XML or binary) printed as XML: `plutil -convert xml1 -o - PATH` (plutil(1))."""
    return ["plutil", "-convert", "xml1", "-o", "-", path]


def keep_alive(plist_xml: str) -> bool | None:
    """Whether launchd starts the job again when it ends, from its plist (launchd.plist(5)):
    `KeepAlive` true, or a dictionary of conditions (SuccessfulExit, Crashed, PathState ...)
    under which it does; False when absent or false (a job that ends stays ended, whatever
    `state` says: a WatchPaths job also shows `spawn scheduled`); None when unreadable."""
    try:
        document = plistlib.loads(plist_xml.encode())
    except (plistlib.InvalidFileException, ValueError, ExpatError):
        return None
    if not isinstance(document, dict):
        return None
    value = document.get("KeepAlive", False)
    if isinstance(value, dict):
        return bool(value)
    return value is True


def log_paths(job: LaunchdJob) -> tuple[str, ...]:
    """The job's StandardOutPath and StandardErrorPath, each once, stdout first."""
    paths = (job.keys.get("stdout path", ""), job.keys.get("stderr path", ""))
    return tuple(dict.fromkeys(path for path in paths if path))
