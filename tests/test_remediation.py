"""Repairs end to end: the daemon diagnoses from evidence, acts through the guard rails, proves
the repair with a real completion and records every step. Real servers on loopback, a real
SQLite file, real processes, and (for the SSH drill) the real OpenSSH server."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.core.actor import Actor, Via
from supervisor.judge.machine import State, Trigger
from supervisor.playbook.live import LivePlaybook
from supervisor.record.timeline.base import EntryKind
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.record.timeline.repair import StepRan
from supervisor.repair.guards import HostLocks
from supervisor.worker import EndpointWorker
from tests.conftest import SimFactory
from tests.helpers import eventually, write_fleet
from tests.ports import free_port
from tests.sshd import Sshd

pytestmark = pytest.mark.slow


def _state(worker: EndpointWorker) -> State:
    return worker.state


def _incident(worker: EndpointWorker) -> int | None:
    return worker.record.incident_id


def _rule(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)


async def _stale_worker(port: int, token: str) -> asyncio.subprocess.Process:
    """A leftover vLLM worker: a process titled VLLM::Worker_TP0 that holds the port."""
    code = (
        "import socket, time\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('127.0.0.1', {port})); s.listen(1); print('bound', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        f'exec -a "VLLM::Worker_TP0 {token}" "$0" -c "$1"',
        sys.executable,
        code,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"bound\n"
    return proc


async def _keep_restarting(sim: VllmSim, port: int) -> None:
    """What systemd's Restart= does for the real unit: try to start the server until it binds."""
    while True:
        try:
            await sim.start("127.0.0.1", port)
            return
        except OSError:
            await asyncio.sleep(0.05)


STALE_RULE = """\
id: stale-listener
title: old vLLM workers hold the port
severity: critical
applies_to: {{states: [down]}}
evidence:
  - {{id: port, collect: listeners, params: {{port: {port}}}}}
when:
  all:
    - {{fact: port.count, op: ge, value: 1}}
    - {{fact: port.commands, op: all_match, value: "VLLM::Worker_TP0 {token}"}}
actions:
  - action: kill_processes
    on: host
    params: {{pattern: "^VLLM::Worker_TP0 {token}", signal: KILL, only_listening_on: {port}}}
verify: {{within: 10s}}
mode: auto
budget: {{attempts: 1, window: 1h}}
"""


async def test_a_stale_listener_is_killed_over_ssh_and_the_repair_verified(
    tmp_path: Path, sshd: Sshd
) -> None:
    port, token = free_port(), secrets.token_hex(4)
    stale = await _stale_worker(port, token)
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="m")
    playbook = tmp_path / "playbooks"
    _rule(playbook, "stale", STALE_RULE.format(port=port, token=token))
    host = sshd.host
    config = write_fleet(
        tmp_path,
        {
            "m": {
                "kind": "openai",
                "url": f"http://127.0.0.1:{port}",
                "model": "m",
                "units": [{"host": "spark1", "unit": "vllm-m.service"}],
            }
        },
        hosts={
            "forge": {"local": True},
            "spark1": {
                "address": host.address,
                "port": host.port,
                "user": host.user,
                "key": str(host.key),
                "known_hosts": str(host.known_hosts),
            },
        },
        probe={"timeout": "500ms"},
        remediation={"verify_every": "100ms"},
        playbook=str(playbook),
    )
    restarter = asyncio.create_task(_keep_restarting(sim, port))
    daemon = Supervisor(load_config(config))
    await daemon.start()
    worker = daemon.workers["m"]
    try:
        await eventually(lambda: _incident(worker) is not None, within=20, what="an incident")
        incident_id = _incident(worker)
        assert incident_id is not None
        await eventually(lambda: _incident(worker) is None, within=30, what="healed")
        assert worker.state is State.HEALTHY
        assert await asyncio.wait_for(stale.wait(), 5) == -9  # killed, and only it
        assert daemon.store is not None
        assert daemon.remediator is not None
        await daemon.remediator.wait()
        timeline = await daemon.store.timeline(incident_id)
        attempts = await daemon.store.attempts("m")
    finally:
        restarter.cancel()
        await daemon.stop()
        await sim.stop()
        with contextlib.suppress(ProcessLookupError):
            stale.kill()
    kinds = [(row.kind, row.summary) for row in timeline]
    summaries = [s for _, s in kinds]
    assert (
        summaries[0] == "unknown -> down: timed out after 500ms (2 failures and a failed re-probe)"
    )
    evidence = [s for k, s in kinds if k is EntryKind.EVIDENCE]
    assert evidence == ["listeners (port) on vllm-m.service@spark1: 3 facts"]
    assert (
        EntryKind.DIAGNOSIS,
        "m (down): stale-listener matched on vllm-m.service@spark1",
    ) in kinds
    steps = [row for row in timeline if row.kind is EntryKind.ACTION]
    assert len(steps) == 1
    step = steps[0].record
    assert isinstance(step, StepRan)
    assert (step.index, step.action, step.target, step.verdict) == (
        0,
        "kill_processes",
        "spark1",
        "ok",
    )
    commands = steps[0].data["commands"]
    assert isinstance(commands, list)
    kill = [c for c in commands if isinstance(c, dict) and "kill" in str(c["command"])]
    assert kill
    assert all(c["exit_status"] == 0 for c in kill)
    transitions = [s for k, s in kinds if k is EntryKind.TRANSITION]
    assert [t.split(":")[0] for t in transitions[1:]] == [
        "down -> remediating",
        "remediating -> verifying",
        "verifying -> healthy",
    ]
    assert (EntryKind.VERIFICATION, "verified: stale-listener healed it") in kinds
    assert [(a.rule_id, a.outcome) for a in attempts] == [("stale-listener", "healed")]


ALWAYS = """\
id: always
title: always matches
severity: warning
applies_to: {{states: [down]}}
when:
  all:
    - {{fact: probe.reason, op: eq, value: connection refused}}
actions:
  - action: shell
    on: host
    params: {{argv: [{argv}]}}
verify: {{within: 300ms}}
mode: {mode}
budget: {{attempts: 2, window: 1h}}
"""


async def _down_endpoint(
    tmp_path: Path, rule: str | None, remediation: dict[str, Any]
) -> tuple[Supervisor, EndpointWorker]:
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    if rule is not None:
        _rule(playbook, "rule", rule)
    config = write_fleet(
        tmp_path,
        {
            "m": {
                "kind": "openai",
                "url": f"http://127.0.0.1:{free_port()}",
                "model": "m",
                "host": "forge",
            }
        },
        remediation={"verify_every": "100ms", **remediation},
        playbook=str(playbook),
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    return daemon, daemon.workers["m"]


async def _timeline(daemon: Supervisor, worker: EndpointWorker) -> list[tuple[EntryKind, str]]:
    assert daemon.store is not None
    assert daemon.remediator is not None
    remediator = daemon.remediator
    await eventually(lambda: remediator.started(worker.name), what="a repair task")
    await remediator.wait()
    incidents = await daemon.store.incidents(subject="m")
    assert len(incidents) == 1
    return [(r.kind, r.summary) for r in await daemon.store.timeline(incidents[0].id)]


async def test_a_repair_that_never_verifies_escalates_once_when_the_budget_is_spent(
    tmp_path: Path,
) -> None:
    daemon, worker = await _down_endpoint(tmp_path, ALWAYS.format(argv='"true"', mode="auto"), {})
    try:
        await eventually(lambda: _state(worker) is State.ESCALATED, within=20, what="escalated")
        kinds = await _timeline(daemon, worker)
        assert daemon.store is not None
        attempts = await daemon.store.attempts("m")
    finally:
        await daemon.stop()
    assert [(a.rule_id, a.outcome) for a in attempts] == [
        ("always", "not verified within 300ms"),
        ("always", "not verified within 300ms"),
    ]
    decisions = [s for k, s in kinds if k is EntryKind.DECISION]
    assert decisions == ["escalated: budget spent: always ran 2 of 2 times in 1h"]
    transitions = [s.split(":")[0] for k, s in kinds if k is EntryKind.TRANSITION]
    assert transitions == [
        "unknown -> down",
        "down -> remediating",
        "remediating -> verifying",
        "verifying -> down",
        "down -> remediating",
        "remediating -> verifying",
        "verifying -> down",
        "down -> escalated",
    ]
    steps = [s for k, s in kinds if k is EntryKind.ACTION]
    assert len(steps) == 2
    assert all(s.startswith("step 1 shell on forge: ok: ") for s in steps), steps


RESTART_IT = """\
id: restart-it
title: it is down
severity: critical
applies_to: {states: [down]}
when:
  all:
    - {fact: probe.reason, op: eq, value: connection refused}
actions:
  - action: shell
    on: host
    params: {argv: ["true"]}
verify: {within: 1s}
mode: auto
"""

NO_REASONING = """\
id: no-reasoning
title: it answers without reasoning
severity: warning
applies_to: {states: [degraded]}
when:
  all:
    - {fact: probe.reason, op: eq, value: no reasoning text}
actions:
  - action: ask_person
    params: {message: 'relaunch {endpoint.name} with its reasoning parser'}
mode: manual
"""


async def test_a_repair_that_brings_it_back_degraded_is_diagnosed_as_degraded(
    tmp_path: Path,
) -> None:
    """The restart brings the server back without its reasoning parser: verification runs out
    on degraded answers, so the endpoint is `degraded` (diagnosed afresh: the degraded rule
    matches), not `down` again (which would restart it until the budget is spent)."""
    playbook = tmp_path / "playbooks"
    _rule(playbook, "restart-it", RESTART_IT)
    _rule(playbook, "no-reasoning", NO_REASONING)
    port = free_port()
    endpoint = {
        "kind": "openai",
        "url": f"http://127.0.0.1:{port}",
        "model": "m",
        "host": "forge",
        "expect_reasoning": True,
    }
    config = write_fleet(
        tmp_path,
        {"m": endpoint},
        remediation={"verify_every": "100ms"},
        playbook=str(playbook),
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    worker = daemon.workers["m"]
    sim = VllmSim(SimBehaviour(reasoning_field=None), model="m")
    try:
        await eventually(lambda: _state(worker) is State.VERIFYING, what="verifying")
        await sim.start("127.0.0.1", port)  # what the restart brought back
        await eventually(lambda: _state(worker) is State.ESCALATED, within=20, what="escalated")
        kinds = await _timeline(daemon, worker)
    finally:
        await daemon.stop()
        await sim.stop()
    transitions = [s for k, s in kinds if k is EntryKind.TRANSITION]
    assert [t.split(":")[0] for t in transitions] == [
        "unknown -> down",
        "down -> remediating",
        "remediating -> verifying",
        "verifying -> degraded",
        "degraded -> escalated",
    ]
    assert transitions[3] == (
        "verifying -> degraded: restart-it: not verified within 1s; it answers, degraded: "
        "no reasoning text"
    )
    diagnoses = [s for k, s in kinds if k is EntryKind.DIAGNOSIS]
    assert diagnoses == [
        "m (down): restart-it matched on m",
        "m (degraded): no-reasoning matched on m",
    ]


async def test_dry_run_records_the_plan_and_changes_nothing(tmp_path: Path) -> None:
    daemon, worker = await _down_endpoint(
        tmp_path, ALWAYS.format(argv="touch, /tmp/never-written", mode="auto"), {"dry_run": True}
    )
    try:
        await eventually(lambda: _state(worker) is State.DOWN, within=20, what="down")
        kinds = await _timeline(daemon, worker)
        assert daemon.store is not None
        assert await daemon.store.attempts() == []
        assert worker.state is State.DOWN
        incident = (await daemon.store.incidents(subject="m"))[0]
        assert (incident.symptom, incident.cause) == (
            "connection refused",
            "always: always matches",
        )
    finally:
        await daemon.stop()
    assert not await asyncio.to_thread(Path("/tmp/never-written").exists)
    decisions = [s for k, s in kinds if k is EntryKind.DECISION]
    assert decisions == [
        "dry run: would apply always (attempt 1 of 2 for always in 1h): "
        "shell on forge: touch /tmp/never-written"
    ]


async def test_a_manual_rule_calls_a_person_and_runs_nothing(tmp_path: Path) -> None:
    manual = ALWAYS.format(argv="touch, /tmp/never-written", mode="manual").replace(
        "  - action: shell\n    on: host\n    params: {argv: [touch, /tmp/never-written]}",
        "  - action: ask_person\n    params: {message: '{endpoint.name} needs a person'}",
    )
    daemon, worker = await _down_endpoint(tmp_path, manual, {})
    try:
        await eventually(lambda: _state(worker) is State.ESCALATED, within=20, what="escalated")
        kinds = await _timeline(daemon, worker)
    finally:
        await daemon.stop()
    assert [s for k, s in kinds if k is EntryKind.DECISION] == ["escalated: m needs a person"]
    assert [k for k, _ in kinds if k is EntryKind.ACTION] == []


async def test_no_rule_matched_calls_a_person(tmp_path: Path) -> None:
    daemon, worker = await _down_endpoint(tmp_path, None, {})
    try:
        await eventually(lambda: _state(worker) is State.ESCALATED, within=20, what="escalated")
        kinds = await _timeline(daemon, worker)
    finally:
        await daemon.stop()
    assert (EntryKind.DIAGNOSIS, "m (down): no rule matched") in kinds
    assert [s for k, s in kinds if k is EntryKind.DECISION] == [
        "escalated: no rule matched: a person must look"
    ]


async def test_paused_means_recorded_and_not_acted_on(tmp_path: Path) -> None:
    playbook = tmp_path / "playbooks"
    _rule(playbook, "rule", ALWAYS.format(argv='"true"', mode="auto"))
    config = write_fleet(
        tmp_path,
        {
            "m": {
                "kind": "openai",
                "url": f"http://127.0.0.1:{free_port()}",
                "model": "m",
                "host": "forge",
            }
        },
        remediation={},
        playbook=str(playbook),
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    assert daemon.control is not None
    await daemon.control.pause(actor=Actor(who="alice", via=Via.CLI))
    worker = daemon.workers["m"]
    try:
        await eventually(lambda: _state(worker) is State.DOWN, within=20, what="down")
        kinds = await _timeline(daemon, worker)
        assert worker.state is State.DOWN
    finally:
        await daemon.stop()
    assert [s for k, s in kinds if k is EntryKind.DECISION] == [
        "automatic action is paused: not acting"
    ]


async def test_one_repair_per_host_at_a_time_in_a_fixed_order() -> None:
    locks, order = HostLocks(), []

    async def repair(name: str, hosts: list[str], hold: asyncio.Event) -> None:
        async with locks.hold(hosts, name):
            order.append(f"{name} in")
            await hold.wait()
            order.append(f"{name} out")

    first_done, second_done = asyncio.Event(), asyncio.Event()
    pair = asyncio.create_task(repair("ds4", ["spark2", "spark1"], first_done))
    await eventually(lambda: locks.busy(["spark1"]) == {"spark1": "ds4"})
    single = asyncio.create_task(repair("qwen", ["spark1"], second_done))
    await asyncio.sleep(0)
    assert locks.busy(["spark1", "spark2"]) == {"spark1": "ds4", "spark2": "ds4"}
    first_done.set()
    second_done.set()
    await asyncio.gather(pair, single)
    assert order == ["ds4 in", "ds4 out", "qwen in", "qwen out"]


GOOD = """\
id: good
title: a good rule
severity: info
when: {all: [{fact: endpoint.state, op: eq, value: down}]}
mode: manual
"""


def test_a_broken_rule_file_on_reload_is_disabled_and_the_good_rules_stay(tmp_path: Path) -> None:
    _rule(tmp_path, "good", GOOD)
    live = LivePlaybook(tmp_path)
    assert [r.id for r in live().rules] == ["good"]
    _rule(tmp_path, "broken", GOOD.replace("id: good", "id: broken").replace("eq", "equals"))
    problems = live.reload()
    assert problems == [
        f"{tmp_path / 'broken.yaml'}:4: rule 'broken': when.all[0].op: unknown operator 'equals' "
        "(operators: eq, ne, in, not_in, gt, ge, lt, le, regex, not_regex, contains, exists, "
        "count_eq, count_ne, count_gt, count_ge, count_lt, count_le, all_match, any_match)"
    ]
    assert [r.id for r in live().rules] == ["good"]  # the broken one disabled, as at start
    (tmp_path / "broken.yaml").unlink()
    _rule(tmp_path, "second", GOOD.replace("id: good", "id: second"))
    assert live.reload_if_changed() is True
    assert sorted(r.id for r in live().rules) == ["good", "second"]
    assert live.reload_if_changed() is False


async def test_a_restart_asked_for_by_a_person_goes_through_the_guards(tmp_path: Path) -> None:
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    url = f"http://127.0.0.1:{free_port()}"
    config = write_fleet(
        tmp_path,
        {
            "bare": {"kind": "openai", "url": url, "model": "m", "host": "forge"},
            "unit": {
                "kind": "openai",
                "url": url,
                "model": "m",
                "units": [{"host": "forge", "unit": "vllm-x.service"}],
            },
        },
        remediation={},
        playbook=str(playbook),
        startup_grace="1h",
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    remediator = daemon.remediator
    assert remediator is not None
    bare, unit = daemon.workers["bare"], daemon.workers["unit"]
    try:
        await eventually(lambda: _state(unit) is State.STARTING, what="starting")
        assert await remediator.request_restart(unit, who="alice") == (
            "not restarting unit: it is inside its startup grace: let it load"
        )
        await eventually(lambda: _state(bare) is State.STARTING, what="starting")
        await bare.apply(Trigger.SILENCE, "silenced by alice")
        assert await remediator.request_restart(bare, who="alice") == (
            "not restarting bare: it is in maintenance: /unsilence it first"
        )
        await bare.apply(Trigger.UNSILENCE, "unsilenced by alice")
        assert await remediator.request_restart(bare, who="alice") == (
            "not restarting bare: it has no units to restart"
        )
    finally:
        await daemon.stop()


async def test_a_broken_rule_file_beside_a_good_one_never_stops_the_daemon(tmp_path: Path) -> None:
    daemon, worker = await _down_endpoint(tmp_path, ALWAYS.format(argv='"true"', mode="auto"), {})
    await daemon.stop()
    (tmp_path / "playbooks" / "broken.yaml").write_text("id: broken\nwhen: [not, a, rule\n")
    (tmp_path / "state" / "supervisor.db").unlink()
    daemon = Supervisor(load_config(tmp_path / "fleet.yaml"))
    await daemon.start()
    worker = daemon.workers["m"]
    try:
        assert daemon.playbook is not None
        assert [r.id for r in daemon.playbook().rules] == ["always"]
        assert [Path(p.file).name for p in daemon.playbook().errors] == ["broken.yaml"]
        await eventually(lambda: _state(worker) is State.ESCALATED, within=20, what="escalated")
        assert daemon.store is not None
        attempts = await daemon.store.attempts("m")
    finally:
        await daemon.stop()
    assert [a.rule_id for a in attempts] == ["always", "always"]


HOLD = """\
id: hold-{name}
title: a repair that holds its hosts until the test lets it go
severity: critical
applies_to: {{endpoints: [{name}], states: [down]}}
when: {{all: [{{fact: probe.reason, op: eq, value: connection refused}}]}}
actions:
  - action: shell
    on: host
    params: {{argv: [sh, -c, 'until [ -e "$0" ]; do sleep 0.02; done', "{gate}"]}}
verify: {{within: 30s}}
mode: auto
"""


def _let_go(gate: Path) -> None:
    """The held repair's step ends (on each of its hosts): its gate file is there."""
    gate.touch()


async def _decisions(daemon: Supervisor, name: str) -> list[Decision]:
    assert daemon.store is not None
    found = await daemon.store.incidents(subject=name)
    rows = await daemon.store.timeline(found[0].id) if found else []
    return [r.record for r in rows if isinstance(r.record, Decision)]


async def test_a_pair_repair_holds_both_its_hosts_and_a_repair_on_either_waits_for_it(
    tmp_path: Path, sim_factory: SimFactory
) -> None:
    """The runner takes the hosts' locks: `pair` (units on spark1 and spark2) repairs first and
    holds both; `single` on spark2 goes down meanwhile, records that spark2 is busy with `pair`
    (the `hosts_busy` decision) and starts only once the pair's repair let go."""
    playbook = tmp_path / "playbooks"
    pair_gate, single_gate = tmp_path / "pair.go", tmp_path / "single.go"
    _rule(playbook, "pair", HOLD.format(name="pair", gate=pair_gate))
    _rule(playbook, "single", HOLD.format(name="single", gate=single_gate))
    single_sim = await sim_factory(model="m")
    units = {
        "pair": [
            {"host": "spark1", "unit": "vllm-pair-head.service"},
            {"host": "spark2", "unit": "vllm-pair-worker.service"},
        ],
        "single": [{"host": "spark2", "unit": "vllm-single.service"}],
    }
    urls = {"pair": f"http://127.0.0.1:{free_port()}", "single": single_sim.url}
    config = write_fleet(
        tmp_path,
        {
            name: {"kind": "openai", "url": urls[name], "model": "m", "units": units[name]}
            for name in ("pair", "single")
        },
        hosts={"spark1": {"local": True}, "spark2": {"local": True}},
        remediation={"verify_every": "100ms"},
        playbook=str(playbook),
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    pair, single = daemon.workers["pair"], daemon.workers["single"]
    try:
        await eventually(lambda: _state(pair) is State.REMEDIATING, within=20, what="pair")
        assert daemon.remediator is not None
        assert daemon.remediator.locks.busy(["spark1", "spark2"]) == {
            "spark1": "pair",
            "spark2": "pair",
        }
        await single_sim.stop()
        busy = Decision(outcome=Outcome.HOSTS_BUSY, holders={"spark2": "pair"})
        await eventually(
            lambda: _has(daemon, "single", busy), within=20, what="single waits for spark2"
        )
        assert _state(single) is State.DOWN  # waiting for the lock, not repairing
        _let_go(pair_gate)
        await eventually(lambda: _state(single) is State.REMEDIATING, within=20, what="single")
        assert daemon.remediator.locks.busy(["spark1", "spark2"]) == {"spark2": "single"}
        _let_go(single_gate)
        assert busy not in await _decisions(daemon, "pair")  # read while the store is open
    finally:
        await daemon.stop()


async def _has(daemon: Supervisor, name: str, decision: Decision) -> bool:
    return decision in await _decisions(daemon, name)


async def test_a_persons_restart_is_refused_while_a_repair_runs_and_once_the_budget_is_spent(
    tmp_path: Path, sim_factory: SimFactory
) -> None:
    playbook = tmp_path / "playbooks"
    gate = tmp_path / "repair.go"
    _rule(playbook, "hold", HOLD.format(name="down", gate=gate))
    sim = await sim_factory(model="m")
    config = write_fleet(
        tmp_path,
        {
            "down": {
                "kind": "openai",
                "url": f"http://127.0.0.1:{free_port()}",
                "model": "m",
                "units": [{"host": "forge", "unit": "vllm-down.service"}],
            },
            "spent": {
                "kind": "openai",
                "url": sim.url,
                "model": "m",
                "units": [{"host": "forge", "unit": "vllm-spent.service"}],
            },
        },
        remediation={"verify_every": "100ms", "max_attempts": 1, "window": "1h"},
        playbook=str(playbook),
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    down, spent = daemon.workers["down"], daemon.workers["spent"]
    remediator, store = daemon.remediator, daemon.store
    assert remediator is not None
    assert store is not None
    try:
        await eventually(lambda: _state(down) is State.REMEDIATING, within=20, what="a repair")
        assert await remediator.request_restart(down, who="alice") == (
            "not restarting down: a repair is running"
        )
        _let_go(gate)
        # an automatic repair of `spent` an hour ago spent its endpoint's budget
        await eventually(lambda: _state(spent) is State.HEALTHY, within=20, what="healthy")
        await store.start_attempt(
            endpoint="spent", rule_id="some-rule", incident_id=None, at=daemon.clock.now()
        )
        assert await remediator.request_restart(spent, who="alice") == (
            "not restarting spent: budget spent: 1 of 1 repairs of spent in 1h"
        )
        decided = await _decisions(daemon, "down")  # read while the store is open
    finally:
        await daemon.stop()
    refused = [d for d in decided if d.outcome is Outcome.RESTART_REFUSED]
    assert refused == [
        Decision(outcome=Outcome.RESTART_REFUSED, actor="alice", why="a repair is running")
    ]
