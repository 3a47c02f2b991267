"""Issue 36's drills in the lab: Spark 1's Ollama (models on demand, `idle` while nothing is
loaded) fails a person's load for memory, heard from its journal: one incident, a person asked,
nothing restarted; the llama-swap router on spark2 in front of the single node (`qwen`), with a
route through it (`qwen-via-swap`: `via: swap`, `backend: qwen`): the backend's unit dies, or
the router's; one incident, at the cause, the route shown blocked by it (no incident, no repair
of its own) and healthy again once the daemon repaired the cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_lab import fleet
from fleet_lab.drills import run as drills
from fleet_lab.lab import Lab

pytestmark = pytest.mark.slow

WARN = (
    'level=WARN source=server.go:1012 msg="model request too large for system" '
    'requested="6.0 GiB" available="3.0 GiB" total="3.0 GiB" free="3.0 GiB" swap="0 B"'
)
ASKED = (
    "ollama.service on spark1 could not load ollama's model: not enough memory (MemAvailable "
    "3.0 GiB of 119.7 GiB, page cache 1.3 GiB). Not stopping anything: free memory (another "
    "model, the vLLM neighbour's share) or choose a smaller model; the next real check loads it "
    "again."
)


async def test_an_ollama_load_that_fails_for_memory_asks_a_person(lab: Lab, tmp_path: Path) -> None:
    """Idle (nothing loaded, no probe loads it), then the vLLM neighbour holds the memory and a
    person's request fails: heard from the journal at once, ollama-out-of-memory (manual) asks a
    person; no step, no restart (the unit's MainPID is the same), one incident."""
    pid = lab.host("spark1").show(fleet.OLLAMA_UNIT, "MainPID")["MainPID"]
    report = await drills.run_drill(lab, "ondemand-load-fails", folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.endpoint == "ollama"
    assert report.diagnoses == (
        f"ollama (down): ollama-out-of-memory matched on {fleet.OLLAMA_UNIT}@spark1",
    )
    assert report.steps == ()
    assert report.attempts == 0
    assert report.final_state == "escalated"
    assert report.escalation == f"{ASKED} (runbook: runbooks/ollama-out-of-memory.md)"
    assert report.incidents == ("ollama",)
    assert report.detect_s is not None
    assert 0 <= report.detect_s < 10
    assert report.escalate_s is not None
    assert 0 <= report.escalate_s < 10
    assert report.passed
    opened, diagnosed, asked = report.notified.texts
    assert opened.startswith("🔴 <b>ollama</b> is down: a load failed (out-of-memory): time=")
    assert opened.endswith(f" {WARN}\nincident #{report.incident}")
    assert diagnosed == f"🔎 ollama diagnosis: {report.diagnosis}"
    assert asked.startswith(f"🆘 <b>a person is needed</b> on ollama: {ASKED}\nrunbook:\n")
    assert asked.endswith(f"/ack {report.incident} stops the reminders")
    assert lab.host("spark1").show(fleet.OLLAMA_UNIT, "MainPID")["MainPID"] == pid


@pytest.mark.parametrize(
    ("drill", "cause", "unit"),
    [
        ("router-backend-dead", "qwen", f"{fleet.QWEN_UNIT}@spark1"),
        ("router-dead", "swap", f"{fleet.SWAP_UNIT}@spark2"),
    ],
)
async def test_a_dead_router_or_backend_is_one_incident_and_the_route_is_blocked(
    lab: Lab, tmp_path: Path, drill: str, cause: str, unit: str
) -> None:
    """The cause's unit exits 0 (its server ended: Restart=on-failure leaves it dead): one
    incident, the cause's, repaired by engine-death-clean-exit; the route is shown blocked by it
    (unreachable, no incident, no attempt anywhere else) and healthy again without a person."""
    report = await drills.run_drill(lab, drill, folder=tmp_path)
    print("\n".join(report.lines()))
    assert report.problem == ""
    assert report.endpoint == cause
    assert report.acted_on == f"{cause} (down): engine-death-clean-exit matched on {unit}"
    assert [s.summary.split(":")[0] for s in report.steps] == [f"step 1 restart_units on {cause}"]
    assert report.outcome == "healed"
    assert report.incidents == (cause,)
    # by the cause's state, or (its failure not yet confirmed) by a probe of it at that moment
    (reason,) = report.blocked.values()
    assert list(report.blocked) == ["qwen-via-swap"]
    assert reason == f"blocked by {cause} (down)" or reason.startswith(f"blocked by {cause}: ")
    assert report.routes_opened == ()
    assert report.attempts_elsewhere == 0
    assert report.detect_s is not None
    assert 0 < report.detect_s < 10
    assert report.heal_s is not None
    assert 0 < report.heal_s < 30
    assert report.passed
    texts = report.notified.texts
    assert texts[0].startswith(f"🔴 <b>{cause}</b> is down: "), texts
    assert texts[0].endswith(
        "\nblocked by it while it fails: qwen-via-swap (no alert per route)"
        f"\nincident #{report.incident}"
    ), texts
    resolved = [t for t in texts if t.startswith(f"✅ <b>{cause}</b> is healthy again after ")]
    assert len(resolved) == 1, texts
    assert resolved[0].endswith(f"\nfixed by: engine-death-clean-exit (restart_units on {cause})")
