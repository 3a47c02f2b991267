"""A playbook reload treats a broken rule file as start does: that rule is disabled (logged, and
`rules` says why), the other rules, new ones included, are in force. A real daemon, a real
vLLM-shaped server on loopback, a real SQLite store, the real `rules` command."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from supervisor.app.root import Supervisor
from supervisor.cli import main
from supervisor.config.loader import load_config
from supervisor.judge.machine import State
from supervisor.playbook.live import LivePlaybook
from tests.conftest import SimFactory
from tests.helpers import eventually, write_fleet

GOOD = """\
id: {id}
title: repairs a refused connection
severity: warning
applies_to: {{states: [down]}}
when:
  all:
    - {{fact: probe.reason, op: eq, value: connection refused}}
actions:
  - action: shell
    on: host
    params: {{argv: ["true"]}}
verify: {{within: 300ms}}
mode: auto
budget: {{attempts: 1, window: 1h}}
"""
BROKEN = GOOD.format(id="broken").replace("op: eq", "op: equals")
UNKNOWN_OP = (
    "{file}:7: rule 'broken': when.all[0].op: unknown operator 'equals' (operators: eq, ne, in, "
    "not_in, gt, ge, lt, le, regex, not_regex, contains, exists, count_eq, count_ne, count_gt, "
    "count_ge, count_lt, count_le, all_match, any_match)"
)


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


async def test_a_good_rule_beside_a_broken_one_fires_after_a_reload(
    tmp_path: Path, sim_factory: SimFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = await sim_factory()
    folder = tmp_path / "playbooks"
    folder.mkdir()
    endpoint = {"kind": "openai", "url": sim.url, "model": "sim-model", "host": "forge"}
    config = write_fleet(
        tmp_path,
        {"m": endpoint},
        remediation={"verify_every": "100ms"},
        playbook=str(folder),
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    try:
        worker = daemon.workers["m"]
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        broken = _write(folder, "broken", BROKEN)
        _write(folder, "good", GOOD.format(id="good"))
        with capture_logs() as logs:
            problems = daemon.reload_playbook()
        assert problems == [UNKNOWN_OP.format(file=broken)]
        assert [(e["event"], e.get("file")) for e in logs if e["log_level"] == "error"] == [
            ("rule disabled", str(broken))
        ]
        assert daemon.playbook is not None
        assert [r.id for r in daemon.playbook().rules] == ["good"]
        await sim.stop()  # down: connection refused, which the good rule repairs
        await eventually(lambda: worker.state is State.ESCALATED, within=20, what="escalated")
        assert daemon.store is not None
        attempts = await daemon.store.attempts("m")
    finally:
        await daemon.stop()
    assert [a.rule_id for a in attempts] == ["good"]
    capsys.readouterr()
    assert main(["rules", "--playbook", str(folder)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "ID      MODE  SEVERITY  APPLIES TO   ACTIONS  STATUS",
        "good    auto  warning   states down  shell    ok",
        "broken  -     -         -            -        disabled",
        UNKNOWN_OP.format(file=broken),
    ]


def test_a_rule_broken_by_an_edit_is_disabled_and_the_others_stay(tmp_path: Path) -> None:
    _write(tmp_path, "good", GOOD.format(id="good"))
    edited = _write(tmp_path, "broken", GOOD.format(id="broken"))
    live = LivePlaybook(tmp_path)
    assert sorted(r.id for r in live().rules) == ["broken", "good"]
    edited.write_text(BROKEN)
    _write(tmp_path, "new", GOOD.format(id="new"))
    assert live.reload_if_changed() is True
    assert sorted(r.id for r in live().rules) == ["good", "new"]
    assert live().disabled == (str(edited),)
    assert live().lines() == [UNKNOWN_OP.format(file=edited)]


def test_a_folder_that_cannot_be_read_keeps_the_rules_in_force(tmp_path: Path) -> None:
    folder = tmp_path / "playbooks"
    folder.mkdir()
    _write(folder, "good", GOOD.format(id="good"))
    live = LivePlaybook(folder)
    (folder / "good.yaml").unlink()
    folder.rmdir()
    folder.write_text("not a folder")
    with capture_logs() as logs:
        problems = live.reload()
    assert problems == [f"{folder}: cannot read the playbook folder: Not a directory"]
    assert [r.id for r in live().rules] == ["good"]
    assert [e["event"] for e in logs if e["log_level"] == "error"] == [
        "playbook folder unreadable: the rules in force stay"
    ]
