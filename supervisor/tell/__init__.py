"""Tell: what reaches a person: Telegram (alerts, commands) and the web side (the page, /metrics,
/status, /healthz)."""
