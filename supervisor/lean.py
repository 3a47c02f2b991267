"""What a `fleet-supervisor` process keeps out of its imports.

Optional imports of our dependencies load what this process never uses, when it is installed
beside us (the test extras bring it; a deployed venv has none of it): httpx (python-telegram-bot's
HTTP client) imports its command line (click, rich, pygments), structlog its rich tracebacks
(rich, pygments), Mako (when a store is made) pygments, httpcore trio just to tell whether it
runs under trio: ~11 MB resident; the daemon runs (and its memory is) as in a deployed venv.
And aiohttp loads its compiled WebSocket reader and mask with its client, though the daemon opens
and serves no WebSocket (~0.25 MB; its pure-Python ones stand in). Each import is written to fall
back when it fails; a `None` in `sys.modules` makes it fail.
"""

import sys

UNUSED = (
    "httpx._main",
    "rich",
    "pygments",
    "trio",
    "aiohttp._websocket.reader_c",
    "aiohttp._websocket.mask",
)


def keep_out() -> None:
    """Make the imports of `UNUSED` fail in this process (before anything imports them)."""
    for name in UNUSED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
