"""The worker's queue: a lost host's news first, then commands (the repair runner's and the
control API's) in the order sent, then probe ticks. A repair's records never wait behind the
probes of a frozen server (each would run into its timeout)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from supervisor.clock import SystemClock
from supervisor.config import Endpoint
from supervisor.events import Outcome, ProbeResult, ProbeTick, Tier
from supervisor.machine import FleetMachine, Trigger
from supervisor.store import Store
from supervisor.worker import EndpointWorker
from supervisor.worker_state import restored_from

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
            outcome=Outcome.FAIL,
            reason="timed out after 30s",
            at=datetime.now(UTC),
            latency_s=30.0,
        )


async def test_commands_go_ahead_of_waiting_probe_ticks(tmp_path: Path) -> None:
    clock = SystemClock()
    now = clock.now()
    prober = GatedProber()
    async with await Store.open(tmp_path / "s.db") as store:
        worker = EndpointWorker(
            ENDPOINT,
            machine=FleetMachine(),
            store=store,
            prober=prober,
            clock=clock,
            restored=restored_from(None, now=now, grace_until=now - timedelta(seconds=1)),
            unreachable_hosts=set(),
        )
        task = asyncio.create_task(worker.run())
        try:
            worker.submit(ProbeTick(endpoint="ds4", tier=Tier.LIVENESS, at=now))
            await asyncio.wait_for(prober.started.wait(), 5)  # the first probe is in flight
            worker.submit(ProbeTick(endpoint="ds4", tier=Tier.DEEP, at=now))  # waits behind it
            fired = asyncio.create_task(worker.apply(Trigger.SILENCE, "silenced by alice"))
            await asyncio.sleep(0)
            prober.gates[0].set()  # the probe in flight ends (it cannot be overtaken)
            change = await asyncio.wait_for(fired, 5)
            # the command ran before the waiting deep tick: that probe has not even started
            assert change is not None
            assert prober.asked == [Tier.LIVENESS]
        finally:
            for gate in prober.gates:
                gate.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
