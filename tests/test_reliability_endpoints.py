"""Endpoints that misbehave without going away: one that hangs (answers nothing), one that is
slow, one that returns garbage. The daemon keeps probing, calls each down or degraded with a
plain reason, and the others it supervises stay healthy."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_lab.vllm_sim.server import SimBehaviour
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.judge.machine import State
from tests.conftest import SimFactory
from tests.helpers import eventually, write_fleet

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("behaviour", "state", "cause"),  # cause: how the incident's cause begins
    [
        (SimBehaviour(hang=True), State.DOWN, "timed out after 500ms"),
        (SimBehaviour(bad_json=True), State.DOWN, 'bad JSON in response: {"id": "chatcmpl-'),
        (SimBehaviour(tok_s=5.0), State.DOWN, "timed out after 500ms"),
    ],
)
async def test_a_misbehaving_endpoint_is_called_out_and_the_others_stay_healthy(
    tmp_path: Path, sim_factory: SimFactory, behaviour: SimBehaviour, state: State, cause: str
) -> None:
    bad, good = await sim_factory(behaviour, model="m"), await sim_factory(model="m")
    (tmp_path / "playbooks").mkdir()
    config = write_fleet(
        tmp_path,
        {
            "bad": {"kind": "openai", "url": bad.url, "model": "m", "baseline_tok_s": 500},
            "good": {"kind": "openai", "url": good.url, "model": "m", "baseline_tok_s": 500},
        },
        probe={"timeout": "500ms"},
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    try:
        worker = daemon.workers["bad"]
        await eventually(
            lambda: worker.state is state and worker.record.incident_id is not None,
            within=20,
            what=f"{state} with its incident recorded",
        )
        assert daemon.workers["good"].state is State.HEALTHY
        assert daemon.store is not None
        incidents = await daemon.store.incidents(open_only=True)
    finally:
        await daemon.stop()
    assert [i.subject for i in incidents] == ["bad"]
    assert incidents[0].cause.startswith(cause), incidents[0].cause  # the id after it is random
