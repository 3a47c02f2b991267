"""`fleet-supervisor doctor`: every read-only check against the real hosts, in one table."""
