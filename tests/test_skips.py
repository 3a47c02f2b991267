"""Run as a user other than root, the root-only parts skip with a reason, and the run ends with one
line that says what was skipped, as whom and why (`tests.skips`, from tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nobody import as_someone_else
from tests.skips import ALLOWED, skip_line, strict_line

ROOT = Path(__file__).resolve().parent.parent


def nested_env(**extra: str) -> dict[str, str]:
    """This process's environment for a nested pytest run, less the caller's `PYTEST_ADDOPTS`:
    the run is the spec's own command line (a caller's `-v` would undo its `-q`)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return {**env, **extra}


@pytest.mark.parametrize(
    ("reasons", "uid", "line"),
    [
        ([], 1000, None),
        (["no docker"], 0, "skipped 1 as root: 1 × no docker"),
        (
            ["the lab needs root", "no docker", "the lab needs root", "needs root (useradd)"],
            1000,
            "skipped 4 as uid 1000 (not root): 2 × the lab needs root; "
            "1 × needs root (useradd); 1 × no docker",
        ),
    ],
)
def test_the_skip_line(reasons: list[str], uid: int, line: str | None) -> None:
    assert skip_line(reasons, uid) == line


NOBODY_SKIP = (
    "uid 65534 cannot read this clone or its Python (/root/c, /root/c/.venv): clone where other "
    "users can read (not under /root) to run it as another user"
)
STRICT_HEAD = "FAILED: {n} unexpected skips as root on Linux (tests/skips.py ALLOWED lists the "


@pytest.mark.parametrize(
    ("reasons", "uid", "platform", "strict", "line"),
    [
        # as root on Linux under the test command: only the allow-list may skip
        ([NOBODY_SKIP, NOBODY_SKIP], 0, "linux", True, None),
        (
            ["openssl is missing", NOBODY_SKIP, "no IPv6 loopback here", "openssl is missing"],
            0,
            "linux",
            True,
            STRICT_HEAD.format(n=3)
            + "allowed ones): 2 × openssl is missing; 1 × no IPv6 loopback here",
        ),
        # not held to it: not root, not Linux, or plain pytest (no FLEET_STRICT_SKIPS)
        (["the lab needs root"], 1000, "linux", True, None),
        (["no systemd-analyze"], 0, "darwin", True, None),
        (["no systemd-analyze"], 0, "linux", False, None),
        ([], 0, "linux", True, None),
    ],
)
def test_as_root_on_linux_a_skip_outside_the_allow_list_fails_the_run(
    reasons: list[str], uid: int, platform: str, strict: bool, line: str | None
) -> None:
    assert strict_line(reasons, uid, platform=platform, strict=strict) == line


def test_every_allowed_skip_says_why() -> None:
    assert [a.reason for a in ALLOWED if len(a.why) < 40] == []


@pytest.mark.slow
def test_as_a_user_other_than_root_the_lab_skips_and_the_run_says_why_in_one_line() -> None:
    """The lab package and the installer specs, run as nobody (as we are, when not root)."""
    prefix, uid = as_someone_else()
    result = subprocess.run(
        [
            *prefix,
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"),
            *("tests/lab/test_lab_cli.py", "tests/lab/test_fleet.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=nested_env(PYTHONDONTWRITEBYTECODE="1", HOME="/tmp"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert (
        f"skipped 10 as uid {uid} (not root): 6 × the lab needs root; "
        "4 × the lab needs root: it mounts filesystems and starts systemd"
    ) in lines
    assert lines[-1].startswith("10 skipped in ")


SKIPS = """
import pytest

def test_allowed():
    pytest.skip({allowed!r})

def test_other():
    pytest.skip({other!r})

def test_ran():
    pass
"""


@pytest.mark.parametrize(
    ("other", "code", "line"),
    [
        (
            "openssl is missing",
            1,
            STRICT_HEAD.format(n=1) + "allowed ones): 1 × openssl is missing",
        ),
        (NOBODY_SKIP, 0, "skipped 2 as root: 2 × " + NOBODY_SKIP),
    ],
)
def test_the_test_command_fails_a_run_as_root_that_skipped_what_it_should_run(
    tmp_path: Path, other: str, code: int, line: str
) -> None:
    """A real pytest run with this suite's conftest, as the test command runs it (strict)."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        pytest.skip("held to the allow-list only as root on Linux")
    spec = tmp_path / "test_some.py"
    spec.write_text(SKIPS.format(allowed=NOBODY_SKIP, other=other))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "-q",
            str(spec),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=nested_env(FLEET_STRICT_SKIPS="1"),
        timeout=120,
        check=False,
    )
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert line in lines, result.stdout
