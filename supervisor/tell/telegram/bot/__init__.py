"""The Telegram bot: the operator's commands and buttons (`Commands`, `_commands`), the commands
that look (`_looking`) and act (`_acting`), the questions with buttons (`_questions`) and what
they share (`_common`)."""

from supervisor.tell.telegram.bot._commands import COMMANDS, Commands
from supervisor.tell.telegram.bot._common import App

__all__ = ["COMMANDS", "App", "Commands"]
