"""STAND-INS, NOT macOS: the lab's `lsof`, `memory_pressure`, `vm_stat`, `sysctl`, `plutil` and
BSD `stat -f` for the Mac lab host (m3ultra) on Linux. `python -m fleet_lab.mac.tools TOOL ARGS`.

Each prints what macOS's tool prints (the shapes recorded under tests/data/evidence/macos/, whose
sources `supervisor/playbook/evidence/macos.py` names) from the Linux host's real state:

- `lsof -nP -iTCP:PORT -sTCP:LISTEN`: the sockets listening on PORT, read from `ss -Hltnpe`
  (real processes, real pids), one line each under lsof's header; nothing and exit 1 when none.
- `memory_pressure [-Q]`, `vm_stat`, `sysctl -n kern.memorystatus_vm_pressure_level|hw.memsize`:
  from the host's /proc/meminfo (the lab host's own meminfo file), with Apple silicon's 16 KiB
  pages. The pressure level (1 normal, 2 warn, 4 critical) is the stand-in's own rule from the
  free percentage (>= 15 %, >= 5 %, below): macOS's kernel decides it otherwise.
- `plutil -convert xml1 -o - FILE`: the plist as XML (the job's KeepAlive is read from it).
- `stat -f FORMAT [--] FILE...` (BSD: `%m` modified, `%z` size, `%N` name); without `-f` the
  machine's GNU stat runs (on Linux `-f` would mean the file system).
"""

from __future__ import annotations

import os
import plistlib
import pwd
import re
import subprocess
import sys
from collections.abc import Callable, Mapping

PAGE = 16384
USAGE = 64
_USERS = re.compile(r'\("(?P<command>[^"]*)",pid=(?P<pid>\d+),fd=(?P<fd>\d+)\)')
_INODE = re.compile(r"\bino:(\d+)")
HEADER = "COMMAND     PID   USER   FD   TYPE             DEVICE SIZE/OFF NODE NAME"


def _user(pid: str) -> str:
    try:
        return pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
    except (OSError, KeyError):
        return "?"


def _name(local: str) -> tuple[str, str]:
    """ss's local address -> (lsof's TYPE, NAME): `*:8013` for a wildcard, `[::1]:8013`."""
    host, _, port = local.rpartition(":")
    ipv6 = host.startswith("[") or (host == "*" and local.count(":") > 1)
    if host in ("0.0.0.0", "[::]", "*"):  # noqa: S104 - read from ss, never bound
        host = "*"
    return ("IPv6" if ipv6 else "IPv4"), f"{host}:{port}"


def lsof_lines(ss_output: str) -> list[str]:
    """`ss -Hltnpe` lines -> lsof's lines (COMMAND cut to 9 characters, spaces as `\\x20`)."""
    lines: list[str] = []
    for line in ss_output.splitlines():
        words = line.split()
        if len(words) < 5:
            continue
        kind, name = _name(words[3])
        inode = _INODE.search(line)
        device = f"0x{int(inode.group(1)) if inode else 0:016x}"
        for user in _USERS.finditer(line):
            command = user["command"][:9].replace(" ", "\\x20")
            fd, pid = f"{user['fd']}u", user["pid"]
            lines.append(
                f"{command:<9} {pid:>7} {_user(pid):>6} {fd:>4} {kind:>6} {device:>18} "
                f"{'0t0':>8} {'TCP':>4} {name} (LISTEN)"
            )
    return lines


def lsof(args: list[str]) -> tuple[str, int]:
    ports = [a.removeprefix("-iTCP:") for a in args if a.startswith("-iTCP:")]
    if len(ports) != 1 or not ports[0].isdigit() or "-sTCP:LISTEN" not in args:
        sys.stderr.write(
            "lsof: the fleet lab's stand-in answers `-nP -iTCP:PORT -sTCP:LISTEN` only\n"
        )
        return "", USAGE
    done = subprocess.run(
        ["ss", "-Hltnpe", f"sport = :{ports[0]}"], capture_output=True, text=True, check=False
    )
    lines = lsof_lines(done.stdout)
    if not lines:
        return "", 1
    return "\n".join([HEADER, *lines]) + "\n", 0


def meminfo(text: str | None = None) -> dict[str, int]:
    """/proc/meminfo in bytes."""
    if text is None:
        with open("/proc/meminfo") as handle:
            text = handle.read()
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            found[name.strip()] = int(words[0]) * 1024
    return found


def free_percent(memory: Mapping[str, int]) -> int:
    total = memory.get("MemTotal", 0)
    free = memory.get("MemAvailable", memory.get("MemFree", 0))
    return round(100 * free / total) if total else 0


def memory_pressure(args: list[str]) -> tuple[str, int]:
    memory = meminfo()
    total = memory.get("MemTotal", 0)
    text = (
        f"The system has {total} ({total // PAGE} pages with a page size of {PAGE}).\n"
        f"System-wide memory free percentage: {free_percent(memory)}%\n"
    )
    return text, 0


def vm_stat(args: list[str]) -> tuple[str, int]:
    memory = meminfo()
    used = sum(memory.get(k, 0) for k in ("MemFree", "Active", "Inactive", "Cached"))
    rows = {
        "Pages free": memory.get("MemFree", 0),
        "Pages active": memory.get("Active", 0),
        "Pages inactive": memory.get("Inactive", 0),
        "Pages speculative": 0,
        "Pages throttled": 0,
        "Pages wired down": max(0, memory.get("MemTotal", 0) - used),
        "Pages purgeable": 0,
        "File-backed pages": memory.get("Cached", 0),
        "Pages occupied by compressor": 0,
    }
    lines = [f"Mach Virtual Memory Statistics: (page size of {PAGE} bytes)"]
    lines += [f"{name + ':':<30}{size // PAGE:>16}." for name, size in rows.items()]
    return "\n".join(lines) + "\n", 0


def sysctl(args: list[str]) -> tuple[str, int]:
    names = [a for a in args if a != "-n"]
    memory = meminfo()
    values: dict[str, Callable[[], str]] = {
        "kern.memorystatus_vm_pressure_level": lambda: (
            "1" if free_percent(memory) >= 15 else "2" if free_percent(memory) >= 5 else "4"
        ),
        "hw.memsize": lambda: str(memory.get("MemTotal", 0)),
        "hw.pagesize": lambda: str(PAGE),
    }
    out: list[str] = []
    for name in names:
        if name not in values:
            sys.stderr.write(f"sysctl: unknown oid '{name}'\n")
            return "", 1
        value = values[name]()
        out.append(value if "-n" in args else f"{name}: {value}")
    return "\n".join(out) + "\n", 0


def _bsd_stat(path: str, fmt: str) -> str:
    info = os.stat(path)
    fields = {"m": str(int(info.st_mtime)), "z": str(info.st_size), "N": path, "%": "%"}
    return re.sub(r"%(.)", lambda m: fields.get(m.group(1), m.group(0)), fmt)


def stat(args: list[str]) -> tuple[str, int]:
    if not args or args[0] != "-f" or len(args) < 3:
        os.execv("/usr/bin/stat", ["stat", *args])  # noqa: S606 - GNU stat, argv as given
    fmt, paths = args[1], [p for p in args[2:] if p != "--"]
    out: list[str] = []
    status = 0
    for path in paths:
        try:
            out.append(_bsd_stat(path, fmt))
        except OSError as exc:
            sys.stderr.write(f"stat: {path}: stat: {exc.strerror}\n")
            status = 1
    return "".join(f"{line}\n" for line in out), status


def plutil(args: list[str]) -> tuple[str, int]:
    """`plutil -convert xml1 -o - FILE`: any plist (XML or binary) printed as XML; the only
    form the supervisor runs."""
    if len(args) != 5 or args[:4] != ["-convert", "xml1", "-o", "-"]:
        sys.stderr.write("plutil: the stand-in answers `plutil -convert xml1 -o - FILE` only\n")
        return "", USAGE
    path = args[4]
    try:
        with open(path, "rb") as handle:
            document = plistlib.load(handle)
    except OSError:
        sys.stderr.write(
            f"{path}: file does not exist or is not readable or is not a regular file\n"
        )
        return "", 1
    except (plistlib.InvalidFileException, ValueError) as exc:
        sys.stderr.write(f"{path}: Property List error: {exc}\n")
        return "", 1
    return plistlib.dumps(document, fmt=plistlib.FMT_XML).decode(), 0


TOOLS: Mapping[str, Callable[[list[str]], tuple[str, int]]] = {
    "lsof": lsof,
    "plutil": plutil,
    "memory_pressure": memory_pressure,
    "vm_stat": vm_stat,
    "sysctl": sysctl,
    "stat": stat,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in TOOLS:
        print(f"mac_tools: one of {', '.join(TOOLS)}, then its arguments", file=sys.stderr)
        return USAGE
    text, status = TOOLS[argv[0]](argv[1:])
    sys.stdout.write(text)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
