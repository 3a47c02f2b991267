"""`report` on a store an observe-only daemon filled in the lab: the single node's engine hangs
(requests running, no token), the daemon in dry run diagnoses hung-engine and records the
restart it would have made; the report lists it, with the exact commands, and changes nothing."""

from __future__ import annotations

import asyncio
import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from fleet_lab import fleet
from fleet_lab.drills import faults
from fleet_lab.drills.config import completes, install_sudoers, write_config
from fleet_lab.lab import Lab
from supervisor import cli
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from tests.helpers import eventually

pytestmark = pytest.mark.slow


async def test_report_on_a_dry_run_in_the_lab_lists_what_it_would_have_done(
    lab: Lab, tmp_path: Path
) -> None:
    fleet.prepare(lab)
    await eventually(lambda: completes("qwen"), within=40, what="qwen serving")
    path = write_config(lab, tmp_path, endpoint="qwen", startup_grace="0s")
    document = yaml.safe_load(path.read_text())
    document["remediation"]["dry_run"] = True
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    before = faults.qwen_main_pid(lab)
    config = load_config(path)
    await asyncio.to_thread(install_sudoers, lab, config)  # the lab's user: its generated sudoers
    daemon = Supervisor(config)
    await daemon.start()
    try:
        await eventually(lambda: daemon.workers["qwen"].state.value == "healthy", within=30)
        faults.inject_hung_engine(lab)
        assert daemon.remediator is not None
        remediator = daemon.remediator
        await eventually(lambda: remediator.started("qwen"), within=60, what="a dry-run plan")
        await remediator.wait()
    finally:
        await daemon.stop()
        (lab.host("spark1").folder / fleet.QWEN_CONTROL).unlink(missing_ok=True)
    out = io.StringIO()
    with redirect_stdout(out):
        code = await asyncio.to_thread(cli.main, ["--config", str(path), "report"])
    assert code == 0
    text = out.getvalue()
    would = text.split("WOULD HAVE DONE\n", 1)[1].splitlines()[0]
    assert would.endswith(
        "rule hung-engine: restart_units on qwen: sudo -n systemctl stop vllm-qwen.service && "
        "sudo -n systemctl reset-failed vllm-qwen.service && "
        "sudo -n systemctl start vllm-qwen.service"
    ), text
    assert faults.qwen_main_pid(lab) == before  # observe-only: the unit was never restarted
    print(text)
