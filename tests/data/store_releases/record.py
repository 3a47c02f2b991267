"""Record the statements an earlier release's own code ran to make its store, into
`tests/data/store_releases/NAME.json`: tests/test_store_releases.py replays them, then opens the
store with today's code. Not run by the suite: run once per release, from a worktree of its
commit put first on the path (README.md beside this file lists the runs)::

    git worktree add /tmp/r-ea4e345 ea4e345
    PYTHONPATH=/tmp/r-ea4e345 .venv/bin/python tests/data/store_releases/record.py \
        NAME sqlite /tmp/r/supervisor.db [--after]

It opens (creates) the store as that release's daemon did (`Store.open`), then runs each step
that made tables on demand in that release: the notifier's start (`OutboxStore.ensure`), the
control API's (`ControlStore.ensure`), a `doctor` run (`save_doctor_run`), each where the release
has it. Every statement that changed the schema or its marks (CREATE, ALTER, DROP, a PRAGMA set,
the rows of `alembic_version` and `store_meta`) is kept with its parameters, under the step that
ran it. `--after` appends a later release's run on the same store (a store that lived through two
releases).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

HERE = Path(__file__).parent
_KEPT = re.compile(
    r"\s*(CREATE|ALTER|DROP)\b"
    r"|\s*PRAGMA\s+\w+\s*="
    r"|\s*(INSERT INTO|UPDATE) (alembic_version|store_meta)\b",
    re.IGNORECASE,
)


def _module(*names: str) -> Any:
    """The first of `names` the release has (its store moved from `supervisor.store`)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return None


def _commit() -> str:
    """The release's commit (its worktree's HEAD)."""
    supervisor: Any = importlib.import_module("supervisor")
    tree = Path(supervisor.__file__).parent.parent
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short=7", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


async def _record(engine_name: str, where: str) -> dict[str, list[Any]]:
    store_module = _module("supervisor.record.store.store", "supervisor.store.store")
    outbox = _module("supervisor.record.store.outbox", "supervisor.store.outbox")
    control = _module("supervisor.control.tables")
    doctor = _module("supervisor.record.store.doctor")
    if engine_name == "sqlite":
        target: Any = Path(where)
    else:
        target = _module("supervisor.record.store.target", "supervisor.store.target").PgTarget(
            url=where
        )
    steps: dict[str, list[Any]] = {}
    current: list[Any] = []

    def kept(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        if _KEPT.match(statement):
            current.append([statement, list(params) if params else []])

    event.listen(Engine, "before_cursor_execute", kept)
    store = await store_module.Store.open(target)
    steps["open"], current = current, []
    try:
        await outbox.OutboxStore(store).ensure()
        steps["notifier"], current = current, []
        if control is not None:
            await control.ControlStore(store).ensure()
            steps["control"], current = current, []
        if doctor is not None:
            at = datetime(2026, 11, 26, 13, 40, tzinfo=UTC)
            await doctor.save_doctor_run(store, at=at, ok=True, summary="1 ok", document={})
            steps["doctor"], current = current, []
    finally:
        await store.close()
    return steps


def main(argv: list[str]) -> None:
    # the venv's editable install finds today's `supervisor` before any path: the release's is
    # the one on PYTHONPATH
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in repr(f)]
    name, engine_name, where = argv[:3]
    path = HERE / f"{name}.json"
    found: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    commit = _commit()
    steps = asyncio.run(_record(engine_name, where))
    runs = found.get(engine_name, []) if "--after" in argv else []
    found[engine_name] = [*runs, {"commit": commit, "steps": steps}]
    path.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{path}: {engine_name} {commit}: {sum(len(s) for s in steps.values())} statements")


if __name__ == "__main__":
    main(sys.argv[1:])
