"""Lab drills: time to detect and time to heal (or to escalate) of every drill, several runs each,
against the probe intervals the drills configure. Needs root on Linux (the lab).

    .venv/bin/python bench/drills.py                 # boots its own lab, 5 runs of every drill
    .venv/bin/python bench/drills.py --lab FOLDER    # in a running lab (`fleet-supervisor lab up`)
    .venv/bin/python bench/drills.py --smoke         # one drill once; writes nothing
    .venv/bin/python bench/drills.py --events        # the unit-level drills at production
                                                     # intervals: systemd's events find them
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, median, write_section
from fleet_lab import fleet
from fleet_lab.drills import config as drill_config
from fleet_lab.drills import faults
from fleet_lab.drills import run as drills
from fleet_lab.drills.report import DrillReport
from fleet_lab.lab import Lab, LabError, check_root
from supervisor.core import logs

TITLE = "Lab drills"
SMOKE_DRILL = "engine-death-clean-exit"
EVENTS_TITLE = "Lab drills: the event path at production intervals"
EVENT_DRILLS = ("ghost-execstart", "engine-death-clean-exit", "orphan-enginecore")


@dataclass
class Runs:
    """One drill's runs: its reports, and the runs that could not even start (the lab)."""

    drill: str
    reports: list[DrillReport] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.reports) + len(self.broken)


def spread(values: list[float]) -> str:
    """`median (min-max)` in seconds, or `-` when no run gave the figure."""
    if not values:
        return "-"
    return f"{median(values):.1f} s ({min(values):.1f}-{max(values):.1f})"


def settled_s(report: DrillReport) -> float | None:
    """Detected -> healed (or healthy again on its own), or -> escalated."""
    return report.escalate_s if report.expect is faults.Expect.ESCALATE else report.heal_s


def row(runs: Runs) -> str:
    fault = faults.get(runs.drill)
    detect = [r.detect_s for r in runs.reports if r.detect_s is not None]
    settled = [s for r in runs.reports if (s := settled_s(r)) is not None]
    passed = sum(r.passed for r in runs.reports)
    outcome = {
        faults.Expect.HEAL: "healed",
        faults.Expect.LEAVE_ALONE: "back on its own",
        faults.Expect.ESCALATE: "escalated",
        faults.Expect.BUSY: "busy, left alone",
    }[fault.expect]
    return (
        f"| `{runs.drill}` | `{fault.rule}` | {passed} of {runs.count} {outcome} | "
        f"{spread(detect)} | {spread(settled)} |"
    )


def table(all_runs: list[Runs]) -> str:
    probe = drills.PROBE
    lines = [
        f"Every drill run {all_runs[0].count if all_runs else 0} time(s) against the lab "
        f"(spark1, spark2: real systemd and sshd; m3ultra: the Mac, a stand-in with no macOS), "
        f"the daemon probing the drilled endpoint (ds4; qwen for the ghost-execstart-host/-203 "
        f"drills; kimi, a launchd job on m3ultra, for mlx-zombie, launchd-job-dead and "
        f"launchd-job-crashloop) every "
        f"{probe['liveness_interval']} (liveness) and {probe['completion_interval']} (a real "
        f"completion), down after {probe['failures_to_down']} failures, timeout "
        f"{probe['timeout']}; startup grace 20s (unknown-failure: 8s). Detect: fault injected -> "
        "ds4 down, degraded or unreachable. Then: detected -> healed (a real completion passed), "
        "healthy on its own (cold-start), or escalated to a person. Median (min-max).",
        "",
        "| drill | rule | runs that did what they must | detect | heal / escalate |",
        "|---|---|---|---|---|",
    ]
    lines += [row(runs) for runs in all_runs]
    broken = [f"- {r.drill}: {problem}" for r in all_runs for problem in r.broken]
    failed = [
        f"- {r.drill}: {report.problem or report.outcome or 'did not pass'}"
        for r in all_runs
        for report in r.reports
        if not report.passed
    ]
    if broken or failed:
        lines += ["", "Runs that did not pass:", *broken, *failed]
    return "\n".join(lines)


def from_fault(report: DrillReport) -> float | None:
    """Fault injected -> healed."""
    if report.detect_s is None or report.heal_s is None:
        return None
    return report.detect_s + report.heal_s


def polling_only(drill: str, results: Path) -> str:
    """The drill's detect figure in the polling-only section (500 ms liveness), or `-`."""
    text = results.read_text() if results.exists() else ""
    section = text.split(f"## {TITLE}\n", 1)[-1].split("\n## ", 1)[0] if text else ""
    for line in section.splitlines():
        if line.startswith(f"| `{drill}` |"):
            return line.split(" | ")[3]
    return "-"


def events_table(all_runs: list[Runs], results: Path) -> str:
    probe = drill_config.PRODUCTION
    lines = [
        f"Each drill run {all_runs[0].count if all_runs else 0} time(s) against the lab, the "
        f"daemon at the production intervals: liveness every {probe['liveness_interval']}, a "
        f"real completion every {probe['completion_interval']}, down after "
        f"{probe['failures_to_down']} failures and a re-probe, timeout {probe['timeout']}; "
        "systemd's unit events streamed from each host (`supervisor/hear/units.py`). Detect: "
        "fault injected -> down (a death event plus one failed probe). Heal: fault injected -> "
        "healthy (repaired and proven by a real completion). Median (min-max). Polling only, "
        "these intervals need at least 2 minutes (3 failed liveness checks a minute apart, then a "
        "re-probe) and up to 5 more for a real check; the polling-only column is the measured "
        "figure of the section above at its 500 ms liveness interval.",
        "",
        "| drill | rule | runs healed | detect (events) | heal from the fault | "
        "polling only: detect at 500 ms liveness | polling only at these intervals |",
        "|---|---|---|---|---|---|---|",
    ]
    for runs in all_runs:
        fault = faults.get(runs.drill)
        detect = [r.detect_s for r in runs.reports if r.detect_s is not None]
        healed = [s for r in runs.reports if (s := from_fault(r)) is not None]
        passed = sum(r.passed for r in runs.reports)
        lines.append(
            f"| `{runs.drill}` | `{fault.rule}` | {passed} of {runs.count} | {spread(detect)} | "
            f"{spread(healed)} | {polling_only(runs.drill, results)} | >= 120 s |"
        )
    failed = [
        f"- {r.drill}: {report.problem or report.outcome or 'did not pass'}"
        for r in all_runs
        for report in r.reports
        if not report.passed
    ]
    if failed:
        lines += ["", "Runs that did not pass:", *failed]
    return "\n".join(lines)


async def measure(
    lab: Lab, names: list[str], runs: int, probe: dict[str, object] | None = None
) -> list[Runs]:
    measured: list[Runs] = []
    for name in names:
        current = Runs(name)
        for number in range(1, runs + 1):
            try:
                report = await drills.run_drill(lab, name, probe=probe)
            except LabError as exc:
                current.broken.append(str(exc))
                print(f"{name} run {number}: could not run: {exc}", flush=True)
                continue
            current.reports.append(report)
            done = settled_s(report)
            print(
                f"{name} run {number}: {'passed' if report.passed else 'FAILED'}, detect "
                f"{report.detect_s or 0:.1f}s, then {done or 0:.1f}s",
                flush=True,
            )
        measured.append(current)
    return measured


def run(
    lab_folder: Path | None,
    names: list[str],
    runs: int,
    results: Path | None,
    *,
    events: bool = False,
) -> int:
    probe = dict(drill_config.PRODUCTION) if events else None
    if lab_folder is not None:
        lab = Lab.load(lab_folder.absolute())
        if not all(lab.running().values()):
            raise LabError(
                f"the lab in {lab.folder} is not up: run `fleet-supervisor lab up` first"
            )
        measured = asyncio.run(measure(lab, names, runs, probe))
    else:
        own = Path(tempfile.mkdtemp(prefix="fleet-supervisor-bench-", dir="/var/lib"))
        lab = fleet.create(own)
        try:
            lab.up()
            measured = asyncio.run(measure(lab, names, runs, probe))
        finally:
            lab.down()
            shutil.rmtree(own, ignore_errors=True)
    if events:
        write_section(EVENTS_TITLE, events_table(measured, results or RESULTS), results)
    else:
        write_section(TITLE, table(measured), results)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_DRILL} once; writes nothing")
    parser.add_argument("--runs", type=int, default=5, help="runs of each drill (default 5)")
    parser.add_argument("--lab", type=Path, metavar="FOLDER", help="a running lab (left up)")
    parser.add_argument(
        "--drill", action="append", metavar="NAME", help="only this drill (repeatable)"
    )
    parser.add_argument("--results", type=Path, default=None, help=f"default {RESULTS}")
    parser.add_argument(
        "--events",
        action="store_true",
        help=f"{', '.join(EVENT_DRILLS)} at the production intervals (the event path)",
    )
    args = parser.parse_args()
    logs.silence()
    try:
        check_root()
        names = [SMOKE_DRILL] if args.smoke else (args.drill or list(faults.FAULTS))
        if args.events:
            names = args.drill or list(EVENT_DRILLS)
        for name in names:
            faults.get(name)
        results = args.results if args.smoke else (args.results or RESULTS)
        runs = 1 if args.smoke else args.runs
        return run(args.lab, names, runs, results, events=args.events)
    except LabError as exc:
        print(f"bench/drills.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
