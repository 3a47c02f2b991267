"""The store: endpoint and host states, incidents, their append-only timeline, probe samples.

One SQLite file (WAL) written by the daemon and read beside it by the CLI, or one PostgreSQL
database shared by two instances (`target`). `store.Store` opens either.
"""
