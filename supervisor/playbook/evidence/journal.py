"""The `journal` collector: what the unit logged since the endpoint last passed a check
(`journalctl -u UNIT --since @EPOCH -n LINES -o cat`), else its last lines.

Reading only since the last passing check keeps an old, already healed failure (a fork-shm or
Mamba error from last week) out of today's diagnosis. The cut-off is taken `SKEW_MARGIN` before
the hub's last-ok time, because journalctl compares it with the host's clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import Field

from supervisor.execute.shape import Pattern, Shape
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    CollectorParams,
    FactValue,
    Scope,
)
from supervisor.playbook.evidence.declare import (
    collector,
    failed,
    failure,
    found,
    run_read,
    scope_unit,
)

#: what journalctl prints instead of lines when the unit logged nothing
NO_ENTRIES = "-- No entries --"
#: how much earlier than the last passing check the journal is read (clock skew hub <-> host)
SKEW_MARGIN = timedelta(seconds=30)


class JournalParams(CollectorParams):
    lines: Annotated[int, Field(strict=True, ge=1, le=100_000)] = 200


def parse_journal(text: str) -> dict[str, FactValue]:
    """The `journal` facts: the text (journalctl's own notices dropped) and its line count."""
    kept = [line for line in text.splitlines() if line.strip() != NO_ENTRIES]
    return {"text": "\n".join(kept), "lines": len(kept)}


def journal_since(last_ok_at: datetime | None) -> datetime | None:
    """Where the journal is read from: `SKEW_MARGIN` before the last passing check, whole
    seconds (rounded down), UTC; None (the last lines, whenever written) without one."""
    if last_ok_at is None:
        return None
    since = (last_ok_at - SKEW_MARGIN).astimezone(UTC)
    return since.replace(microsecond=0)


def journal_argv(unit: str, lines: int, since: datetime | None) -> list[str]:
    """`journalctl -u UNIT [--since @EPOCH] -n LINES --no-pager -o cat`."""
    window = ["--since", f"@{int(since.timestamp())}"] if since is not None else []
    return ["journalctl", "-u", unit, *window, "-n", str(lines), "--no-pager", "-o", "cat"]


def since_text(since: datetime | None) -> str:
    """The `since` fact: `2026-03-03T07:01:41Z`, or '' when the journal was not cut."""
    return since.strftime("%Y-%m-%dT%H:%M:%SZ") if since is not None else ""


#: `-n`, after `--since @EPOCH` when the endpoint passed a check before (see `journal_since`).
SINCE_THEN_N = Pattern(regex="(--since @[0-9]+ )?-n", example="-n")


def _journal_privileged(scope: Scope, params: JournalParams) -> tuple[Shape, ...]:
    unit = scope.unit.unit if scope.unit is not None else ""
    argv = ("journalctl", "-u", unit, SINCE_THEN_N, str(params.lines), "--no-pager", "-o", "cat")
    return (Shape(argv=argv),)


@collector(
    "journal",
    params=JournalParams,
    doc="what the unit logged since the endpoint last passed a check (less 30 s for clock skew), "
    "at most LINES lines: `journalctl -u UNIT --since @EPOCH -n LINES -o cat` (root); "
    "the last LINES lines when it never passed one",
    facts={
        "text": "the lines the unit logged since `since` (at most `lines` of them), oldest first",
        "lines": "how many lines came back (0 when the unit logged nothing)",
        "since": "where the journal was read from (UTC, `2026-03-03T07:01:41Z`): 30 s before "
        "the endpoint last passed a check; '' when it never did (the last lines were read)",
    },
    needs_unit=True,
    service_manager="systemd",
    privileged=_journal_privileged,
)
async def journal(ctx: CollectContext, params: JournalParams) -> CollectedEvidence:
    unit = scope_unit(ctx)
    since = journal_since(ctx.last_ok_at)
    result = await run_read(ctx, journal_argv(unit.unit, params.lines, since), sudo=True)
    if not result.ok:
        return failed(failure("journalctl", result), result)
    return found({**parse_journal(result.stdout), "since": since_text(since)}, result)
