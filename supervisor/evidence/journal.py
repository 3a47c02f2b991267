"""The `journal` collector: the last lines the unit logged (`journalctl -u UNIT -o cat`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from supervisor.evidence.base import CollectContext, CollectorParams, Evidence, FactValue
from supervisor.evidence.declare import collector, failed, failure, found, run_read, scope_unit

#: what journalctl prints instead of lines when the unit logged nothing
NO_ENTRIES = "-- No entries --"


class JournalParams(CollectorParams):
    lines: Annotated[int, Field(strict=True, ge=1, le=100_000)] = 200


def parse_journal(text: str) -> dict[str, FactValue]:
    """The `journal` facts: the text (journalctl's own notices dropped) and its line count."""
    kept = [line for line in text.splitlines() if line.strip() != NO_ENTRIES]
    return {"text": "\n".join(kept), "lines": len(kept)}


@collector(
    "journal",
    params=JournalParams,
    doc="the unit's last log lines: `journalctl -u UNIT -n LINES -o cat` (root: system journal)",
    facts={
        "text": "the last `lines` lines the unit logged, oldest first",
        "lines": "how many lines came back (0 when the unit logged nothing)",
    },
    needs_unit=True,
)
async def journal(ctx: CollectContext, params: JournalParams) -> Evidence:
    unit = scope_unit(ctx)
    argv = ["journalctl", "-u", unit.unit, "-n", str(params.lines), "--no-pager", "-o", "cat"]
    result = await run_read(ctx, argv, sudo=True)
    if not result.ok:
        return failed(failure("journalctl", result), result)
    return found(parse_journal(result.stdout), result)
