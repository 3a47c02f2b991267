"""One endpoint's worker: its queue, its probe discipline, its record in the store."""
