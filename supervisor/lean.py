"""What a `fleet-supervisor` process keeps out of its imports.

Optional imports of our dependencies load what this process never uses, when it is installed
beside us (the test extras bring it; a deployed venv has none of it): httpx imports its command
line (click, rich, pygments), structlog its rich tracebacks (rich, pygments), Mako (when a store
is made) pygments, httpcore trio just to tell whether it runs under trio: ~11 MB resident. Each
is written to fall back when the import fails; a `None` in `sys.modules` makes it fail, so the
daemon runs (and its memory is) as in a deployed venv.
"""

import sys

UNUSED = ("httpx._main", "rich", "pygments", "trio")


def keep_out() -> None:
    """Make the imports of `UNUSED` fail in this process (before anything imports them)."""
    for name in UNUSED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
