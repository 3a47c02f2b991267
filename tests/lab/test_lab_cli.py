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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["demo", "--lab", "{f}"],
            "fleet-supervisor: no lab in {f}: run `fleet-supervisor lab up` first\n",
        ),
        (
            ["demo", "--lab", "{f}", "--loopback"],
            "fleet-supervisor: --loopback and --lab exclude each other: the loopback demo boots "
            "no lab\n",
        ),
        (
            ["lab", "--folder", "{f}", "drill", "nope"],
            "fleet-supervisor: no drill 'nope' (drills: ghost-execstart, eaddrinuse-29501, "
            "page-cache-starvation, duplicated-mxfp4-patch, cold-start, ssh-lost, "
            "unknown-failure, ghost-execstart-host, ghost-execstart-203, ghost-kill-127, "
            "ghost-kill-203, escalated-then-ghost, escalated-then-hung, "
            "escalated-other-status, "
            "engine-death-clean-exit, orphan-enginecore, ghost-execstart-no-known-good, "
            "fork-shm-ringbuffer, mamba-block-size, silent-degradation, saturated, hung-engine, "
            "mlx-zombie, launchd-job-dead, launchd-job-crashloop, ondemand-load-fails, "
            "router-backend-dead, router-dead)\n",
        ),
    ],
)
def test_demo_and_drill_refuse_with_one_plain_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main([a.format(f=tmp_path) for a in argv]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", message.format(f=tmp_path))
