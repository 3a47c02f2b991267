"""fleet-supervisor: keeps a home/lab LLM inference fleet serving."""

__version__ = "0.1.0"
