"""What every step of the flow shares: the event records, time, durations, logs, asyncio helpers."""
