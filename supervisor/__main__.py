"""`python -m supervisor` is the same as the `fleet-supervisor` command (what it keeps out of its
imports first: `supervisor.lean`)."""

from supervisor.lean import keep_out

keep_out()

from supervisor.cli import main  # noqa: E402  (after the guard above, on purpose)

raise SystemExit(main())
