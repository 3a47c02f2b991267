"""Telegram chat-ops: alerts composed from the timeline into a persisted outbox, a sender that
delivers them in order, and the operator's commands. See `supervisor.tell.telegram.notifier`.

python-telegram-bot 22.2+ warns (PTBDeprecationWarning) whenever it builds or reads a time period
as a number, which includes building the `RetryAfter` of every 429: we opt in to its
`datetime.timedelta` periods (`PTB_TIMEDELTA`, read at each use), so flood control raises
`RetryAfter`, whose `retry_after` is then a timedelta, and nothing is warned."""

import os

os.environ.setdefault("PTB_TIMEDELTA", "1")
