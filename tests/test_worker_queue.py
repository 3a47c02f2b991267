"""The worker's queue: a lost host's news first, then commands (the repair runner's and the
control API's) in the order sent, then probe ticks; and commands are served while a probe is in
flight. A repair's records never wait for the probes of a frozen server (each would run into its
timeout: 30 s in production)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog

from supervisor.config.supervised import Endpoint
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeOutcome, ProbeResult, ProbeTick, Tier
from supervisor.judge.machine import FleetMachine, Trigger
from supervisor.record.store.lease import StaleEpochError, claim
from supervisor.record.store.store import Store
from supervisor.worker import EndpointWorker, restored_from
from tests.helpers import eventually

ENDPOINT = Endpoint(name="ds4", kind="openai", url="http://127.0.0.1:9", model="m")


class GatedProber:
    """Each probe waits until the test lets it through; it says which tiers it was asked for."""

    def __init__(self) -> None:
        self.asked: list[Tier] = []
        self.started = asyncio.Event()
        self.gates: list[asyncio.Event] = []

    async def __call__(self, endpoint: Endpoint, tier: Tier) -> ProbeResult:
        gate = asyncio.Event()
        self.gates.append(gate)
        self.asked.append(tier)
        self.started.set()
        await gate.wait()
        return ProbeResult(
            endpoint=endpoint.name,
            tier=tier,
            check="health",
            outcome=ProbeOutcome.FAIL,
            reason="timed out after 30s",
            at=datetime.now(UTC),
            latency_s=30.0,
        )


def _worker(store: Store, prober: GatedProber, clock: SystemClock) -> EndpointWorker:
    """ds4's worker, healthy and out of its grace, probing through `prober`."""
    now = clock.now()
    return EndpointWorker(
        ENDPOINT,
        machine=FleetMachine(),
        store=store,
        prober=prober,
        clock=clock,
        restored=restored_from(None, now=now, grace_until=now - timedelta(seconds=1)),
        unreachable_hosts=set(),
    )


async def test_commands_are_served_while_a_probe_is_in_flight_and_before_waiting_ticks(
    tmp_path: Path,
) -> None:
    clock = SystemClock()
    now = clock.now()
    prober = GatedProber()
    async with await Store.open(tmp_path / "s.db") as store:
        worker = _worker(store, prober, clock)
        task = asyncio.create_task(worker.run())
        try:
            worker.submit(ProbeTick(endpoint="ds4", tier=Tier.LIVENESS, at=now))
            await asyncio.wait_for(prober.started.wait(), 5)  # the first probe is in flight
            worker.submit(ProbeTick(endpoint="ds4", tier=Tier.DEEP, at=now))  # waits behind it
            change = await asyncio.wait_for(worker.apply(Trigger.SILENCE, "silenced by alice"), 5)
            # served while the liveness probe is still in flight, the deep tick still waiting
            assert change is not None
            assert not prober.gates[0].is_set()
            assert prober.asked == [Tier.LIVENESS]
            prober.gates[0].set()
            await eventually(lambda: worker.idle.is_set(), what="the worker idle")
            assert prober.asked == [Tier.LIVENESS]  # silenced: the waiting deep tick probes not
        finally:
            for gate in prober.gates:
                gate.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_command_refused_by_the_fence_while_a_probe_is_in_flight_ends_the_worker(
    tmp_path: Path,
) -> None:
    """Deposed mid-probe: the command served meanwhile meets the fence (its caller gets the
    refusal), and the worker ends once the probe in hand is done, probing nothing more, saying
    so in one `deposed` warning (not a `command failed` as well)."""
    clock = SystemClock()
    now = clock.now()
    prober = GatedProber()
    path = tmp_path / "s.db"
    async with await Store.open(path) as store, await Store.open(path) as other:
        async with store.tx(write=True) as conn:
            await claim(conn, holder="a", host="forge", epoch=None, lease_ms=0)
        store.fence_epoch, store.fence_holder, store.fence_host = 1, "a", "forge"
        worker = _worker(store, prober, clock)
        task = asyncio.create_task(worker.run())
        try:
            with structlog.testing.capture_logs() as logged:
                worker.submit(ProbeTick(endpoint="ds4", tier=Tier.LIVENESS, at=now))
                await asyncio.wait_for(prober.started.wait(), 5)  # the probe is in flight
                async with other.tx(write=True) as conn:  # meanwhile b takes the lease over
                    await claim(conn, holder="b", host="spark1", epoch=None, lease_ms=60_000)
                worker.submit(ProbeTick(endpoint="ds4", tier=Tier.DEEP, at=now))  # waits
                with pytest.raises(StaleEpochError) as refused:
                    await asyncio.wait_for(worker.apply(Trigger.SILENCE, "silenced by alice"), 5)
                prober.gates[0].set()
                await asyncio.wait_for(task, 5)  # the worker ended after the probe in hand
        finally:
            for gate in prober.gates:
                gate.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert str(refused.value) == "refused under stale epoch 1: b leads with epoch 2 (a store write)"
    assert prober.asked == [Tier.LIVENESS]  # the waiting deep tick was never probed
    said = [(e["event"], e["log_level"], e.get("stops")) for e in logged]
    assert [e for e in said if e[1] != "info"] == [("deposed", "warning", "the worker")]
