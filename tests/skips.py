"""The one line the suite ends with when it skipped something: how many, as whom, and why
(run as a user other than root, the root-only parts skip: the lab, sshd, the installer). As
root on Linux the test command (scripts/test.sh, `FLEET_STRICT_SKIPS=1`) runs everything it can:
a skip outside the short allow-list below fails the run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Allowed:
    """A skip the test command accepts as root on Linux: its reason starts with `reason`."""

    reason: str
    why: str  #: why this one cannot be run even as root on a Debian machine set up by setup.sh


#: The only skips allowed as root on Linux (`FLEET_STRICT_SKIPS=1`, which scripts/test.sh sets):
#: anything else skipped there is a tool the set-up failed to install or a spec that lost its
#: way, and the run fails naming it.
ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        reason="uid 65534 cannot read this clone or its Python",
        why="a clone under /root (mode 0700): the specs that run a part as another user have "
        "nobody to run it as; clone where other users can read to run them",
    ),
)


def unexpected(reasons: Iterable[str], allowed: Iterable[Allowed] = ALLOWED) -> list[str]:
    """The reasons no entry of `allowed` covers, in the order given."""
    kept = tuple(allowed)
    return [text for text in reasons if not any(text.startswith(a.reason) for a in kept)]


def strict_line(reasons: Iterable[str], uid: int, *, platform: str, strict: bool) -> str | None:
    """The line that fails the run (`strict`, as root on Linux) when something skipped that
    `ALLOWED` does not cover; None when nothing did, or the run is not held to it."""
    if not strict or uid != 0 or not platform.startswith("linux"):
        return None
    counts = Counter(unexpected(reasons))
    if not counts:
        return None
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    why = "; ".join(f"{n} × {text}" for text, n in ranked)
    return (
        f"FAILED: {counts.total()} unexpected skips as root on Linux (tests/skips.py ALLOWED "
        f"lists the allowed ones): {why}"
    )
