"""Every benchmark's `--smoke` mode runs, quickly, and writes its section of a results file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import bench_smoke

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("script", "title", "header"),
    [
        ("bench/queries.py", "Incident queries", "| query | median | p95 |"),
        ("bench/fanout.py", "Probe fan-out", "| endpoints | daemon CPU | peak RSS |"),
        ("bench/notify.py", "Notification latency", "| state change | messages | median |"),
        ("bench/board.py", "Fleet page board", "| page | endpoints | server median |"),
    ],
)
def test_smoke(tmp_path: Path, script: str, title: str, header: str) -> None:
    text = bench_smoke(ROOT, [script], tmp_path / "RESULTS.md")
    assert f"## {title}\n\n- command: `.venv/bin/python {script} --smoke --results" in text
    assert header in text
    rows = [line for line in text.split(header, 1)[1].splitlines()[2:] if line.startswith("|")]
    assert rows, text
    assert all("nan" not in row for row in rows), rows
