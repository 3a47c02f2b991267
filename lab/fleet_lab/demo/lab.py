"""The lab demo (`fleet-supervisor demo` as root on Linux): boot the fleet lab in a fresh folder
under /var/lib, run the four headline drills one after another, narrate in plain words what the
daemon detected, diagnosed, did and verified (with the time to detect and to heal), print each
incident's timeline, and always take the lab down again (Ctrl-C and SIGTERM included).

`--lab FOLDER` runs the drills against a lab that is already up and leaves it up.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fleet_lab import fleet
from fleet_lab.demo.interrupts import Interrupts
from fleet_lab.drills import run as drills
from fleet_lab.drills.report import DrillReport
from fleet_lab.lab import ADDRESSES, Lab, LabError
from supervisor.cli.incidents import entry_lines

#: The four failures the fleet met most, in the order the demo injects them, each told plainly.
HEADLINE: dict[str, str] = {
    "ghost-execstart": (
        "an upgrade left a systemd drop-in that points the DeepSeek head's ExecStart at a launch "
        "script the container does not have: bash exits 127, systemd keeps restarting it "
        "and vLLM never starts"
    ),
    "eaddrinuse-29501": (
        "a worker of the previous run (VLLM::Worker_TP0) still listens on the pair's rendezvous "
        "port 29501 when the head relaunches: torch fails with EADDRINUSE"
    ),
    "page-cache-starvation": (
        "the head's box reports 4.75 of 119.67 GiB free, the rest held by page cache from "
        "earlier model loads: vLLM refuses to start for lack of GPU memory"
    ),
    "duplicated-mxfp4-patch": (
        "the GPU-cache patch in the container's mxfp4.py was applied a second time: the model "
        "load dies with UnboundLocalError: local variable 'w13' referenced before assignment"
    ),
}
#: Where the demo's own lab goes (a fresh folder each run): never /tmp, never the checkout.
PARENT = Path("/var/lib")


class Narrator:
    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.t0 = time.monotonic()
        self.out = out

    def say(self, text: str) -> None:
        self.out(f"[{time.monotonic() - self.t0:5.1f}s] {text}")


def _s(value: float | None) -> str:
    return f"{value:.1f}s" if value is not None else "-"


def narrate(report: DrillReport, say: Callable[[str], None]) -> None:
    """Detected, diagnosed, done, verified: one plain line each."""
    say(f"  detected:  {report.endpoint} went down {_s(report.detect_s)} after the fault "
        f"(incident #{report.incident})")  # fmt: skip
    rule = report.diagnosis.partition(": ")[2] or "no rule matched"
    say(f"  diagnosed: {rule}")
    for step in report.steps:
        say(f"  did:       {step.summary}")
    if not report.steps:
        say("  did:       nothing")
    if report.healed:
        say(f"  verified:  a real completion passed again {_s(report.heal_s)} after detection")
    else:
        say(f"  NOT healed: {report.problem or report.outcome or 'no repair finished'}")
    if report.notified.count:
        first = report.notified.first.splitlines()[0]
        say(f"  told:      {report.notified.count} Telegram messages, the first: {first}")


def timelines(reports: list[DrillReport]) -> list[str]:
    lines: list[str] = []
    for report in reports:
        lines.append("")
        lines.append(f"drill {report.drill}: incident #{report.incident}")
        for row in report.timeline:
            lines.extend(entry_lines(row))
    return lines


async def run_drills(
    lab: Lab, narrator: Narrator, interrupts: Interrupts | None = None
) -> list[DrillReport]:
    """The headline drills against `lab`, narrated; with `interrupts` (a lab of its own), Ctrl-C
    and SIGTERM cancel them (each drill's clean-up runs) and end the demo as interrupted."""
    if interrupts is not None:
        interrupts.attach()
    reports: list[DrillReport] = []
    for number, (name, plain) in enumerate(HEADLINE.items(), 1):
        narrator.out("")
        narrator.say(f"fault {number} of {len(HEADLINE)}, {name}: {plain}")
        report = await drills.run_drill(lab, name)
        if interrupts is not None:
            interrupts.check()  # its cancellation swallowed on the way: interrupted all the same
        narrate(report, narrator.say)
        reports.append(report)
    return reports


def _show(lab: Lab, narrator: Narrator, interrupts: Interrupts | None = None) -> int:
    try:
        reports = asyncio.run(run_drills(lab, narrator, interrupts))
    except asyncio.CancelledError:
        if interrupts is None or interrupts.heard is None:
            raise
        raise KeyboardInterrupt from None
    finally:
        if interrupts is not None:
            interrupts.detach()
    if interrupts is not None:
        interrupts.check()
    print("\n".join(timelines(reports)))
    healed = sum(r.healed for r in reports)
    print(f"\n{healed} of {len(HEADLINE)} faults detected, diagnosed, repaired and verified.")
    return 0 if healed == len(HEADLINE) else 1


def main(folder: Path | None = None) -> int:
    """The lab demo: in a lab of its own (booted and always taken down), or in the running lab
    under `folder` (left up)."""
    narrator = Narrator(lambda text: print(text, flush=True))
    if folder is not None:
        running = Lab.load(folder.absolute())
        if not all(running.running().values()):
            raise LabError(
                f"the lab in {running.folder} is not up: run `fleet-supervisor lab up` first"
            )
        return _show(running, narrator)
    interrupts = Interrupts()
    interrupts.install()  # from here on Ctrl-C and SIGTERM take the lab down
    own: Path | None = None
    lab: Lab | None = None
    try:
        PARENT.mkdir(parents=True, exist_ok=True)
        own = Path(tempfile.mkdtemp(prefix="fleet-supervisor-demo-", dir=PARENT))
        spark1, spark2 = ADDRESSES["spark1"], ADDRESSES["spark2"]
        narrator.say(f"booting the lab in {own}: spark1 ({spark1}) and spark2 ({spark2})")
        lab = fleet.create(own)
        lab.up()
        narrator.say("each is a real systemd with its own sshd; the DeepSeek pair serves on :8000")
        return _show(lab, narrator, interrupts)
    except KeyboardInterrupt:
        print("\ninterrupted: taking the lab down", file=sys.stderr, flush=True)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip this
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if lab is not None:
            lab.down()
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
            print(f"the lab is down and {own} is removed", flush=True)
