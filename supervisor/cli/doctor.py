"""`doctor [NAME...] [--json]`: every read-only check against the real hosts, one table (see
`supervisor.trust.doctor`); exit 0 when nothing failed, 1 when a check failed. The run is kept
in the store (when there is one) for `status`."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from supervisor.cli.common import CliError, load, open_store
from supervisor.cli.render import dump, table
from supervisor.config.keys import read_keys
from supervisor.config.models import FleetConfig
from supervisor.core import logs
from supervisor.core.clock import SystemClock
from supervisor.core.httpclient import HttpClient
from supervisor.execute.fleet import FleetExecutor
from supervisor.record.store.doctor import save_doctor_run
from supervisor.record.store.errors import StoreError
from supervisor.trust.doctor.model import DoctorRun, Status

NAME = "doctor"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        NAME,
        help="read-only checks against the real hosts: SSH, units, containers, models, "
        "/metrics, and whether sudo permits every command the rules would run",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="only these endpoints or hosts")
    p.add_argument("--json", action="store_true")


def main(args: argparse.Namespace) -> int:
    config = load(args)
    logs.silence()
    from supervisor.trust.doctor.run import UnknownNameError  # (loads asyncssh: not for `run`)

    try:
        run = asyncio.run(_doctor(config, args.names))
    except UnknownNameError as exc:
        raise CliError(str(exc)) from None
    if config.store.url is None and not Path(config.store.path).exists():
        note = f"not recorded: no store yet at {config.store.path}"
    else:
        note = asyncio.run(_record(config, run))
    print(dump(run.document()) if args.json else render_doctor(run, note))
    return 0 if run.ok else 1


async def _doctor(config: FleetConfig, names: list[str]) -> DoctorRun:
    from supervisor.trust.doctor.run import run_doctor
    from supervisor.trust.load import in_force

    keyed, key_problems = read_keys(config, os.environ)  # a key it cannot read: a finding
    found = in_force(keyed)
    executor = FleetExecutor(keyed)
    http = HttpClient()
    try:
        return await run_doctor(
            found,
            executor=executor,
            http=http,
            clock=SystemClock(),
            names=names,
            key_problems=key_problems,
        )
    finally:
        await http.aclose()
        await executor.close()


async def _record(config: FleetConfig, run: DoctorRun) -> str:
    """Keep the run in the store for `status`; a line saying why not when it cannot."""
    try:
        store = await open_store(config)
    except StoreError as exc:
        return f"not recorded: {exc}"
    try:
        await save_doctor_run(
            store, at=run.at, ok=run.ok, summary=run.summary(), document=run.document()
        )
    except StoreError as exc:
        return f"not recorded: {exc}"
    finally:
        await store.close()
    return ""


MARK = {Status.OK: "ok", Status.WARN: "WARN", Status.FAIL: "FAIL"}


def render_doctor(run: DoctorRun, note: str = "") -> str:
    rows = []
    for finding in run.findings:
        said = finding.detail
        if finding.fix and finding.status is not Status.OK:
            said = f"{said} -> {finding.fix}"
        rows.append([finding.subject, finding.check, MARK[finding.status], said])
    out = table(["SUBJECT", "CHECK", "STATUS", "FOUND (-> FIX)"], rows)
    verdict = "all ok" if run.ok and not run.count(Status.WARN) else run.summary()
    tail = f"doctor: {verdict}" + (f" ({run.summary()})" if verdict == "all ok" else "")
    return f"{out}\n\n{tail}" + (f"\n{note}" if note else "")
