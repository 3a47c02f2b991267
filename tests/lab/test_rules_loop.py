"""A rule grown from a real incident: the `unknown-failure` drill's store, then `rules draft`,
`rules test` and `rules replay` on it, as a person would run them after the drill."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from fleet_lab.drills import run as drills
from fleet_lab.lab import Lab
from supervisor.cli import main
from supervisor.config.loader import load_config
from supervisor.record.store.store import Store
from supervisor.record.timeline.repair import Diagnosis

ROOT = Path(__file__).resolve().parents[2]
UNKNOWN_TEXT = "RuntimeError: lab preflight: the accelerator refused the context (code 0x5eed)"


async def _main(argv: list[str]) -> int:
    """The CLI as a person runs it (its own event loop, in a thread: the drill's is running)."""
    return await asyncio.to_thread(main, argv)


async def _diagnoses(config: Path, incident: int) -> int:
    """How many diagnoses the drill's store kept for `incident`."""
    async with await Store.open(load_config(config).store.path) as store:
        rows = await store.timeline(incident)
    return sum(isinstance(row.record, Diagnosis) for row in rows)


async def test_a_rule_drafted_from_the_unknown_drill_takes_that_incident_and_no_other(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = await drills.run_drill(lab, "unknown-failure", folder=tmp_path)
    assert report.passed, report.lines()
    incident = report.incident
    assert incident is not None
    playbook = tmp_path / "playbooks"  # a copy: the drill's config names the shipped folder
    shutil.copytree(ROOT / "playbooks", playbook)
    shutil.copytree(ROOT / "runbooks", tmp_path / "runbooks")
    config = ("--config", str(tmp_path / "fleet.yaml"))
    capsys.readouterr()

    draft = [*config, "rules", "draft", str(incident), "--playbook", str(playbook)]
    assert await _main(draft) == 0
    rule_id = f"ds4-incident-{incident}"
    drafted = (playbook / f"{rule_id}.yaml").read_text()
    assert f"  - {{fact: journal.text, op: contains, value: '{UNKNOWN_TEXT}'}}\n" in drafted
    assert "mode: confirm\n" in drafted
    fixture = playbook / "tests" / f"{rule_id}.yaml"
    assert await _main([*config, "rules", "test", str(fixture), "--playbook", str(playbook)]) == 0
    assert await _main([*config, "rules", "replay", "--playbook", str(playbook)]) == 1
    out = capsys.readouterr().out
    # one diagnosis, or two when the escalated endpoint heard systemd's crash loop and looked
    # again (unknown-failure matched again): each now goes to the drafted rule
    looks = await _diagnoses(tmp_path / "fleet.yaml", incident)
    counted, diagnoses, differ = {
        1: ("", "1 diagnosis", "1 differs"),
        2: (" (2 diagnoses)", "2 diagnoses", "2 differ"),
    }[looks]
    assert out.splitlines()[-5:] == [
        "1 passed, 0 failed",
        f"#{incident} ds4 (down): unknown-failure -> {rule_id}{counted}",
        f"{rule_id}: now matches #{incident}",
        f"unknown-failure: no longer matches #{incident}",
        f"replayed {diagnoses} of 1 incident of the last 30d against {playbook}: {differ}",
    ]
