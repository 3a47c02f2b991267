# type: ignore  # written for the code of commit 522b45a (see its docstring), not for this one
"""Make `supervisor.db`: a store written by the code of commit 522b45a (schema version 1, the
timeline as summary + loose JSON), kept to prove that newer code migrates it on open.

Run once, from the repository root at that commit: ``python tests/data/store_v1/make_store.py``.
It does not run against newer code (which writes the typed timeline); it is kept as the record
of how the file was made.

1. A real daemon supervises a vLLM-shaped server on loopback; the server is stopped, the endpoint
   goes down, the `revive` rule (evidence: the port's listeners) matches, its `shell` step runs
   for real (it touches a file, on which this script starts the server again), the repair is
   verified by a real completion: transitions, probes, evidence, a diagnosis, a step, a
   verification.
2. A second daemon on the same store, the `revive` rule now `mode: manual`: the server is
   stopped again, diagnosed, escalated (a decision and an `escalate` transition).
3. With the store API and the producers' own wording of that commit: a Telegram notification
   and an ack (as `notify/sender.py` and `notify/bot.py` write them), a host that stopped and
   started answering (as `hosts.py` writes it), and an attempt a killed daemon left unfinished,
   closed by `daemon.close_interrupted`.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from pathlib import Path

from supervisor.lab.vllm_sim import SimBehaviour, VllmSim

from supervisor.config.loader import load_config
from supervisor.core.clock import utcnow
from supervisor.judge.machine import State
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.base import EntryKind
from supervisor.runtime import Daemon, close_interrupted
from tests.helpers import eventually, write_fleet

RULE = """\
id: revive
title: the server is not running
severity: critical
applies_to: {{states: [down]}}
evidence:
  - {{id: port, collect: listeners, params: {{port: {port}}}}}
when:
  all:
    - {{fact: probe.reason, op: eq, value: connection refused}}
    - {{fact: port.count, op: eq, value: 0}}
actions:
  - action: shell
    on: host
    params: {{argv: [touch, {marker}]}}
verify: {{within: 10s}}
mode: {mode}
runbook: runbooks/revive.md
budget: {{attempts: 2, window: 1h}}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run(folder: Path, port: int, mode: str, sim: VllmSim) -> None:
    marker = folder / "revived"
    playbook = folder / "playbooks"
    playbook.mkdir(exist_ok=True)
    (playbook / "revive.yaml").write_text(RULE.format(port=port, marker=marker, mode=mode))
    endpoint = {"kind": "openai", "url": f"http://127.0.0.1:{port}", "model": "m", "host": "forge"}
    config = write_fleet(
        folder,
        {"m": endpoint},
        remediation={"verify_every": "100ms"},
        playbook=str(playbook),
        probe={"timeout": "500ms"},
    )
    daemon = Daemon(load_config(config))
    await daemon.start()
    worker = daemon.workers["m"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, within=20, what="healthy")
        await sim.stop()
        if mode == "auto":
            await eventually(marker.exists, within=20, what="the step")
            await sim.start("127.0.0.1", port)
            await eventually(lambda: worker.record.incident_id is None, within=20, what="healed")
        else:
            await eventually(lambda: worker.state is State.ESCALATED, within=20, what="escalated")
        assert daemon.remediator is not None
        await daemon.remediator.wait()
    finally:
        await daemon.stop()


async def _extras(path: Path) -> None:
    async with await Store.open(path, create=False) as store:
        first = (await store.incidents(subject="m"))[-1]
        at = utcnow()
        await store.append(
            first.id,
            TimelineEntry(
                kind=EntryKind.NOTIFICATION,
                at=at,
                subject="telegram",
                summary="telegram: opened message sent to chat 42",
                data={"outbox_id": 1, "chat_id": 42, "kind": "opened"},
            ),
        )
        second = (await store.incidents(subject="m"))[0]
        await store.append(
            second.id,
            TimelineEntry(
                kind=EntryKind.NOTE,
                at=at,
                subject="m",
                summary="acknowledged by alice on Telegram: no more reminders",
            ),
        )
        attempt = await store.start_attempt(
            endpoint="m", rule_id="revive", incident_id=second.id, at=at
        )
        assert attempt
        await close_interrupted(store, at)
        for source, dest, reason, cause, close in (
            ("reachable", "unreachable", "connection refused", True, None),
            ("unreachable", "reachable", "answers again", False, "host answers again"),
        ):
            await store.transition(
                snapshot=Snapshot(
                    kind=SubjectKind.HOST,
                    name="spark1",
                    state=dest,
                    since=at,
                    fail_streak=3 if cause else 0,
                    last_reason=reason if cause else "",
                    updated_at=at,
                ),
                entry=TimelineEntry(
                    kind=EntryKind.TRANSITION,
                    at=at,
                    subject="spark1",
                    summary=f"host {source} -> {dest}: {reason}",
                    data={"failures": 3 if cause else 0},
                ),
                open_cause=f"host spark1 does not answer: {reason}" if cause else None,
                close_resolution=close,
            )


async def main() -> None:
    port = _port()
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="m")
    await sim.start("127.0.0.1", port)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        try:
            await _run(folder, port, "auto", sim)
            await _run(folder, port, "manual", sim)
        finally:
            await sim.stop()
        db = folder / "state" / "supervisor.db"
        await _extras(db)
        target = Path(__file__).with_name("supervisor.db")
        shutil.copy(db, target)
        print(f"wrote {target}")


if __name__ == "__main__":
    asyncio.run(main())
