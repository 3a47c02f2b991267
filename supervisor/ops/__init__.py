"""Running on forge: sd_notify and the watchdog, the HTTP server (/metrics, /healthz, /status),
Prometheus text built from the daemon's state, and config reload on SIGHUP."""
