"""`--config FILE` before or after the command, for every command: `check --config FILE` is the
form the first issue promised. Given in both places, the one after the command wins."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from supervisor.cli import main, parse_args
from tests.helpers import write_fleet

COMMANDS = [
    pytest.param(["check"], [], id="check"),
    pytest.param(["run"], ["--dry-run"], id="run"),
    pytest.param(["status"], ["--json"], id="status"),
    pytest.param(["probe"], ["ds4"], id="probe"),
    pytest.param(["incidents"], ["--open"], id="incidents"),
    pytest.param(["timeline"], ["7"], id="timeline"),
    pytest.param(["diagnose"], ["ds4", "--dry-run"], id="diagnose"),
    pytest.param(["demo"], ["--loopback"], id="demo"),
    pytest.param(["rules"], ["--json"], id="rules"),
    pytest.param(["rules", "test"], ["case.yaml"], id="rules-test"),
    pytest.param(["rules", "draft"], ["7", "--id", "new-rule"], id="rules-draft"),
    pytest.param(["rules", "replay"], ["--since", "7d", "--json"], id="rules-replay"),
    pytest.param(["lab"], ["up"], id="lab"),
    pytest.param(["notify-test"], [], id="notify-test"),
    pytest.param(["silence"], ["ds4", "--for", "2h", "--why", "driver update"], id="silence"),
    pytest.param(["unsilence"], ["ds4"], id="unsilence"),
    pytest.param(["pause"], ["ds4"], id="pause"),
    pytest.param(["resume"], [], id="resume"),
    pytest.param(["ack"], ["7"], id="ack"),
    pytest.param(["restart"], ["ds4", "--why", "stuck"], id="restart"),
    pytest.param(["silences"], ["--json"], id="silences"),
    pytest.param(["doctor"], ["ds4", "spark1", "--json"], id="doctor"),
    pytest.param(["sudoers"], ["--host", "spark1"], id="sudoers"),
    pytest.param(["report"], ["--since", "7d", "--json"], id="report"),
]


@pytest.mark.parametrize(("command", "rest"), COMMANDS)
def test_config_before_or_after_the_command(command: list[str], rest: list[str]) -> None:
    before = parse_args(["--config", "a.yaml", *command, *rest])
    after = parse_args([*command, "--config", "b.yaml", *rest])
    both = parse_args(["--config", "a.yaml", *command, "--config", "b.yaml", *rest])
    assert (before.config, after.config, both.config) == ("a.yaml", "b.yaml", "b.yaml")
    assert vars(before) == {**vars(after), "config": "a.yaml"}
    if command != ["lab"]:  # (`lab`'s options come before its subcommand)
        assert parse_args([*command, *rest, "--config", "b.yaml"]) == after


def test_every_command_is_in_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.findall(r"^    (\S+)", capsys.readouterr().out, flags=re.MULTILINE)
    assert sorted(listed) == sorted({p.values[0][0] for p in COMMANDS})  # type: ignore[index]


def test_no_config_anywhere_leaves_the_default() -> None:
    assert parse_args(["check"]).config is None


def test_check_config_after_the_command_checks_that_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_fleet(tmp_path, {"ds4": {"kind": "health", "url": "http://127.0.0.1:9/health"}})
    (tmp_path / "playbooks").mkdir()
    monkeypatch.chdir(tmp_path.parent)  # no ./fleet.yaml here: only --config can find it
    monkeypatch.delenv("FLEET_SUPERVISOR_CONFIG", raising=False)
    assert main(["check", "--config", str(path)]) == 0
    assert capsys.readouterr().out == (
        f"{path}: ok (1 hosts, 1 endpoints)\n{tmp_path / 'playbooks'}: ok (0 rules)\n"
    )
