"""The daemon's HTTP side: the fleet page, /metrics, /healthz, /status and the control routes, for
a leader and (read-only) a follower."""
