"""What a unit's `ExecStart=` runs, from `systemctl show`'s rendering of it (pure functions).

systemd prints one command as::

    { path=/usr/bin/docker ; argv[]=/usr/bin/docker exec vllm_ds4 bash /workspace/vllm-head.sh ;
      ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }

From it: the executable, the argv text, the container a `docker exec` runs in (its flags
skipped), and the script the command really runs (`bash SCRIPT` inside or outside the container).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

_COMMAND = re.compile(r"path=(?P<path>.*?) ; argv\[\]=(?P<argv>.*?) ; ignore_errors=")
SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh"})
#: `docker exec` options that take a value (`-u root`, `--workdir /w`, `-e K=V`)
_DOCKER_VALUE_LONG = frozenset({"--user", "--workdir", "--env", "--env-file", "--detach-keys"})
_DOCKER_VALUE_SHORT = frozenset("uwe")
#: shell options that take a value (`bash -o pipefail script`)
_SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


@dataclass(frozen=True, kw_only=True)
class ExecStart:
    path: str  #: the executable systemd runs (`path=`, else argv[0]); '' when there is none
    argv_text: str  #: argv as systemd printed it, joined by spaces
    script: str  #: what the command really runs (see `script_of`)
    container: str  #: the container of a `docker exec`, else ''


def split_argv(text: str) -> list[str]:
    """Shell-like words (systemd quotes arguments with spaces); plain split if quotes are odd."""
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _name(word: str) -> str:
    return PurePosixPath(word).name


def split_docker_exec(argv: list[str]) -> tuple[str, list[str]]:
    """`(CONTAINER, inner argv)` for `docker exec [flags] CONTAINER CMD...`, else `('', argv)`."""
    if len(argv) < 3 or _name(argv[0]) != "docker" or argv[1] != "exec":
        return "", argv
    index = 2
    while index < len(argv):
        word = argv[index]
        if word == "--":
            index += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            takes_value = word in _DOCKER_VALUE_LONG  # `--user=root` carries its own value
        else:
            cluster = word[1:]
            hits = [i for i, letter in enumerate(cluster) if letter in _DOCKER_VALUE_SHORT]
            takes_value = bool(hits) and hits[0] == len(cluster) - 1  # `-u root`, not `-uroot`
        index += 2 if takes_value else 1
    if index >= len(argv):
        return "", argv
    return argv[index], argv[index + 1 :]


def _inline_script(text: str) -> str:
    """The program `bash -c TEXT` starts, when TEXT begins with a path (`exec /w/run.sh ...`)."""
    words = split_argv(text)
    if words and words[0] == "exec":
        words = words[1:]
    return words[0] if words and "/" in words[0] else ""


def _shell_script(words: list[str]) -> str:
    """The script a shell command line (`bash [options] SCRIPT ...`, `bash -c 'exec SCRIPT'`)
    runs; '' when it cannot tell (other `-c` text, a shell reading standard input)."""
    index = 1
    while index < len(words):
        word = words[index]
        if word == "--":
            return words[index + 1] if index + 1 < len(words) else ""
        if word in _SHELL_VALUE_OPTIONS:
            index += 2
            continue
        if word.startswith(("-", "+")) and len(word) > 1:
            if not word.startswith("--") and "c" in word[1:]:
                return _inline_script(words[index + 1]) if index + 1 < len(words) else ""
            index += 1
            continue
        return word
    return ""


def script_of(argv: list[str]) -> str:
    """What the command runs: for `[env K=V] bash SCRIPT` (or `bash -c 'exec SCRIPT'`),
    SCRIPT; otherwise argv[0] (the shell itself when its script cannot be told)."""
    words = argv
    if words and _name(words[0]) == "env":
        rest = words[1:]
        while rest and ("=" in rest[0] or rest[0].startswith("-")):
            rest = rest[1:]
        words = rest or words
    if words and _name(words[0]) in SHELLS:
        script = _shell_script(words)
        if script:
            return script
    return argv[0] if argv else ""


def parse_exec_start(value: str) -> ExecStart:
    """One `ExecStart=` value of `systemctl show` ('' when the unit has none)."""
    text = value.strip()
    match = _COMMAND.search(text)
    if match is not None:
        path, argv_text = match["path"].strip(), match["argv"].strip()
    else:  # not systemd's `{ path= ; argv[]= ... }` rendering: take it as a command line
        argv_text = text.strip("{} ")
        path = ""
    argv = split_argv(argv_text)
    container, inner = split_docker_exec(argv)
    script = (container and script_of(inner)) or script_of(argv)
    return ExecStart(
        path=path or (argv[0] if argv else ""),
        argv_text=argv_text,
        script=script,
        container=container,
    )
