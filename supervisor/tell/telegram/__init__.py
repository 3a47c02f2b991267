"""Telegram chat-ops: alerts composed from the timeline into a persisted outbox, a sender that
delivers them in order, and the operator's commands. See `supervisor.tell.telegram.notifier`."""
