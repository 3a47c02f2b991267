"""`fleet-supervisor demo`: the lab demo as root on Linux, the loopback demo elsewhere."""
