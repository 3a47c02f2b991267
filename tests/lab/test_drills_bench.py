"""`bench/drills.py --smoke` runs one drill once against the running lab and writes its section of
a results file (the 5-run measurement is run by hand; see bench/README.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleet_lab.lab import Lab
from tests.helpers import bench_smoke

ROOT = Path(__file__).resolve().parents[2]
HEADER = "| drill | rule | runs that did what they must | detect | heal / escalate |"

pytestmark = pytest.mark.slow


def test_the_drill_bench_smoke_writes_its_section(lab: Lab, tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    text = bench_smoke(ROOT, ["bench/drills.py", "--lab", str(lab.folder)], results)
    command = f".venv/bin/python bench/drills.py --smoke --lab {lab.folder} --results {results}"
    assert f"## Lab drills\n\n- command: `{command}`\n" in text
    assert "every 500ms (liveness) and 2s (a real completion), down after 2 failures" in text
    rows = [line for line in text.split(HEADER, 1)[1].splitlines()[2:] if line.startswith("|")]
    assert len(rows) == 1, text
    assert rows[0].startswith(
        "| `engine-death-clean-exit` | `engine-death-clean-exit` | 1 of 1 healed | "
    )
    detect, heal = (cell.strip() for cell in rows[0].strip("| ").split(" | ")[3:5])
    assert detect.endswith(")"), rows[0]
    assert heal.endswith(")"), rows[0]
    assert "nan" not in rows[0]
    assert "Runs that did not pass" not in text


def test_the_drill_bench_refuses_an_unknown_drill_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "bench/drills.py", "--drill", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("bench/drills.py: no drill 'nope' (drills: ghost-execstart, ")
    assert done.stderr.count("\n") == 1
