"""`fleet-supervisor lab`: plain one-line errors (the boot itself is covered by test_hosts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from supervisor.cli import main

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["status"], "fleet-supervisor: no lab in {f}: run `fleet-supervisor lab up` first\n"),
        (["down"], "fleet-supervisor: no lab in {f}: run `fleet-supervisor lab up` first\n"),
        (
            ["drill", "ghost-execstart"],
            "fleet-supervisor: no lab in {f}: run `fleet-supervisor lab up` first\n",
        ),
    ],
)
def test_lab_commands_fail_with_one_plain_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["lab", "--folder", str(tmp_path), *argv]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", message.format(f=tmp_path))
