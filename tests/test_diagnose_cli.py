"""`fleet-supervisor diagnose NAME --dry-run` on the DeepSeek-shaped pair: two hosts, each a real
OpenSSH server on its own loopback address; evidence is gathered over SSH and the plan is listed
in restart order across both hosts, changing nothing."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from supervisor.cli.diagnose import stored_last_ok
from supervisor.config.loader import load_config
from supervisor.record.store.records import Snapshot, SubjectKind
from supervisor.record.store.store import Store
from tests import warmstart
from tests.helpers import write_fleet
from tests.ports import free_port
from tests.sshd import Sshd

pytestmark = pytest.mark.slow

RULE = """\
id: stale-workers
title: old workers are still running
severity: critical
applies_to: {{states: [down]}}
evidence:
  - {{id: procs, collect: processes, params: {{pattern: "^VLLM::Worker_TP0 {token}"}}}}
when:
  all:
    - {{fact: procs.count, op: ge, value: 1}}
actions:
  - action: kill_processes
    on: host
    params: {{pattern: "^VLLM::Worker_TP0 {token}", signal: KILL}}
  - action: restart_units
mode: auto
"""


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Sshd, Sshd]]:
    spark1 = Sshd(tmp_path / "spark1", address="127.0.0.31", name="spark1")
    spark2 = Sshd(tmp_path / "spark2", address="127.0.0.32", name="spark2")
    spark1.start()
    spark2.start()
    try:
        yield spark1, spark2
    finally:
        spark1.stop()
        spark2.stop()


def _host(server: Sshd) -> dict[str, object]:
    host = server.host
    return {
        "address": host.address,
        "port": host.port,
        "user": host.user,
        "key": str(host.key),
        "known_hosts": str(host.known_hosts),
    }


async def test_diagnose_dry_run_on_a_pair_lists_the_ordered_plan_across_both_hosts(
    tmp_path: Path, pair: tuple[Sshd, Sshd]
) -> None:
    spark1, spark2 = pair
    token = secrets.token_hex(4)
    worker = await asyncio.create_subprocess_exec(
        "bash", "-c", f'exec -a "VLLM::Worker_TP0 {token}" sleep 300'
    )
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    (playbook / "stale.yaml").write_text(RULE.format(token=token))
    config = write_fleet(
        tmp_path,
        {
            "ds4": {
                "kind": "openai",
                "url": f"http://127.0.0.1:{free_port()}",
                "model": "deepseek-v4-flash",
                "units": [
                    {"host": "spark2", "unit": "vllm-ds4-worker.service", "container": "vllm_ds4"},
                    {"host": "spark1", "unit": "vllm-ds4-head.service", "container": "vllm_ds4"},
                ],
            }
        },
        hosts={"forge": {"local": True}, "spark1": _host(spark1), "spark2": _host(spark2)},
        playbook=str(playbook),
    )
    try:
        done = await warmstart.run_async(
            ["--config", str(config), "diagnose", "ds4", "--dry-run"], timeout=60
        )
        assert worker.returncode is None  # a dry run kills nothing
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
        await worker.wait()
    text = done.stdout
    assert done.returncode == 0, text + done.stderr
    lines = text.splitlines()
    assert lines[0] == "probed now: down (connection refused)"
    assert lines[1] == (
        "ds4 (down): stale-workers matched on vllm-ds4-worker.service@spark2, "
        "vllm-ds4-head.service@spark1"
    )
    # why: the facts that satisfied the condition, per unit
    assert "  vllm-ds4-worker.service@spark2: yes" in lines
    assert any(line.strip().startswith("procs.count = 1: ge 1: yes") for line in lines)
    plan = lines[lines.index("plan (auto mode, 2 steps):") :]
    pid = worker.pid

    def kill(unit: str) -> str:
        """A root login signals with kill itself; another user's, through the signal helper."""
        if spark1.user == "root":
            return f"sudo -n kill -s KILL -- {pid}"
        helper = "/usr/local/libexec/fleet-supervisor/signal"
        return f"sudo -n {helper} KILL {pid} --unit={unit} --container=vllm_ds4"

    assert plan[1:] == [
        "  1. kill_processes on spark2",
        f"       [spark2] {kill('vllm-ds4-worker.service')}",
        "  1. kill_processes on spark1",
        f"       [spark1] {kill('vllm-ds4-head.service')}",
        "  2. restart_units on ds4",
        "       [spark1] sudo -n systemctl stop vllm-ds4-head.service",
        "       [spark2] sudo -n systemctl stop vllm-ds4-worker.service",
        "       [spark2] sudo -n systemctl reset-failed vllm-ds4-worker.service",
        "       [spark1] sudo -n systemctl reset-failed vllm-ds4-head.service",
        "       [spark2] sudo -n systemctl start vllm-ds4-worker.service",
        "       [spark1] sudo -n systemctl start vllm-ds4-head.service",
        "nothing was changed (dry run)",
    ]


async def test_diagnose_reads_the_journal_from_the_last_passing_check_the_store_saw(
    tmp_path: Path,
) -> None:
    """A separate process from the daemon, `diagnose` takes the endpoint's last passing check
    from the store (the journal collector reads from then); no store: none."""
    config = load_config(write_fleet(tmp_path, {"m": {"kind": "health", "url": "http://x/h"}}))
    assert await stored_last_ok(config, "m") is None
    ok_at = datetime(2026, 11, 23, 6, 0, tzinfo=UTC)
    async with await Store.open(config.store.path) as store:
        snapshot = Snapshot(
            kind=SubjectKind.ENDPOINT,
            name="m",
            state="down",
            since=ok_at,
            last_ok_at=ok_at,
            updated_at=ok_at,
        )
        await store.save_snapshot(snapshot)
    assert await stored_last_ok(config, "m") == ok_at
    assert await stored_last_ok(config, "other") is None
