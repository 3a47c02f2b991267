"""`python -m supervisor` is the same as the `fleet-supervisor` command.

Optional imports of our dependencies load what this process never uses, when it is installed
beside us (the test extras bring it; a deployed venv has none of it): httpx imports its command
line (click, rich, pygments), structlog its rich tracebacks (rich, pygments), Mako (when a store
is made) pygments, httpcore trio just to tell whether it runs under trio: ~11 MB resident. Each
is written to fall back when the import fails; a `None` in `sys.modules` makes it fail, so the
daemon runs (and its memory is) as in a deployed venv.
"""

import sys

for _unused in ("httpx._main", "rich", "pygments", "trio"):
    sys.modules.setdefault(_unused, None)  # type: ignore[arg-type]

from supervisor.cli import main  # noqa: E402  (after the guard above, on purpose)

raise SystemExit(main())
