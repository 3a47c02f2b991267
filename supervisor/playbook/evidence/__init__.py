"""Evidence collectors: named, read-only, each a small function with a typed params model."""
