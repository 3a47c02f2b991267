"""The one line the suite ends with when it skipped something: how many, as whom, and why
(run as a user other than root, the root-only parts skip: the lab, sshd, the installer)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest


def reason(report: pytest.TestReport) -> str:
    """A skip's reason as pytest gives it (`Skipped: ` taken off)."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def skip_line(reasons: Iterable[str], uid: int) -> str | None:
    """`skipped 3 as uid 1000 (not root): 2 × the lab needs root; 1 × no docker`; None when
    nothing was skipped. The most frequent reason first, then by text."""
    counts = Counter(reasons)
    if not counts:
        return None
    who = "as root" if uid == 0 else f"as uid {uid} (not root)"
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    why = "; ".join(f"{n} × {text}" for text, n in ranked)
    return f"skipped {counts.total()} {who}: {why}"
