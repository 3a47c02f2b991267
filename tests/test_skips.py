"""Run as a user other than root, the root-only parts skip with a reason, and the run ends with one
line that says what was skipped, as whom and why (`tests.skips`, from tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nobody import as_someone_else
from tests.skips import skip_line

ROOT = Path(__file__).resolve().parent.parent


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
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert (
        f"skipped 10 as uid {uid} (not root): 6 × the lab needs root; "
        "4 × the lab needs root: it mounts filesystems and starts systemd"
    ) in lines
    assert lines[-1].startswith("10 skipped in ")
