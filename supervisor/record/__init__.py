"""Record: the typed timeline records, the store they are kept in (SQLite or PostgreSQL), and their
plain-words renderings."""
