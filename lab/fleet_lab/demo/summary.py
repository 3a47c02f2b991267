"""What the loopback demo claims at its end, from what the store recorded: who detected each
fault (the supervisor), who undid it (the demo, always: it injects and reverts its own faults)
and who repaired what (the supervisor only when an attempt of its own healed the endpoint)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from supervisor.record.store.records import AttemptRow

#: the outcome the repair runner gives an attempt whose verification passed
HEALED = "healed"


@dataclass(frozen=True, kw_only=True)
class SceneResult:
    endpoint: str
    incident: int | None  #: the incident the supervisor opened; None: it did not detect the fault
    recovered: bool  #: the endpoint passed a real completion again and the incident was closed
    attempts: tuple[AttemptRow, ...]  #: the supervisor's repair attempts for the incident


def attempts_phrase(n: int) -> str:
    """`no repair attempt`, `1 repair attempt`, `2 repair attempts`."""
    return "no repair attempt" if n == 0 else f"{n} repair attempt{'s' if n > 1 else ''}"


def repairs_line(results: Sequence[SceneResult], *, dry_run: bool) -> str:
    healed = [
        f"{r.endpoint}: {a.rule_id}" for r in results for a in r.attempts if a.outcome == HEALED
    ]
    tried = sum(len(r.attempts) for r in results)
    if healed:
        return f"The supervisor repaired {len(healed)} of them ({', '.join(healed)})."
    if dry_run:
        return (
            "The supervisor repaired none of them: it runs observe-only here "
            "(remediation.dry_run), recording what it would do."
        )
    if tried:
        return f"The supervisor repaired none of them ({attempts_phrase(tried)}, none healed)."
    return "The supervisor repaired none of them: it made no repair attempt."


def summary(results: Sequence[SceneResult], *, dry_run: bool) -> list[str]:
    """The demo's closing lines: each claim is backed by what the store recorded."""
    total = len(results)
    detected = sum(r.incident is not None for r in results)
    recovered = sum(r.recovered for r in results)
    return [
        f"The supervisor detected {detected} of {total} faults and opened an incident for each.",
        repairs_line(results, dry_run=dry_run),
        f"The demo undid each of its {total} faults itself; the supervisor then saw a real "
        f"completion pass and closed each incident ({recovered} of {total}).",
    ]
