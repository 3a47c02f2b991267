"""The application: the composition root (root), leadership (leader), the service side (sd_notify,
the watchdog, the HTTP server), and config reload on SIGHUP."""
