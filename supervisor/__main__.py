"""`python -m supervisor` is the same as the `fleet-supervisor` command."""

from supervisor.cli import main

raise SystemExit(main())
