"""The bot's answers to commands, waiting for the sender (`Sender`), which delivers them on the
same paced, retrying path as the alerts: Telegram's flood control (429 `retry_after`) is obeyed
and the answer retried, not lost. Each chat's answers go in the order their commands arrived: a
command takes its place when it arrives (`reserve`) and fills it when its answer is ready
(`fill`), so a slow `/diagnose` is answered before the `/status` sent after it. Answers are
held in memory only: they answer a person now, and are not worth sending after a restart."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from telegram import InlineKeyboardMarkup


@dataclass(eq=False, kw_only=True)
class Reply:
    """One command's answer: its parts (each under Telegram's 4096 characters), sent in order as
    replies to the command's message; the buttons go with the last part."""

    chat_id: int
    reply_to: int | None
    parts: list[str] | None = None  #: None until the command has answered
    markup: InlineKeyboardMarkup | None = None
    sent: int = 0  #: parts delivered so far
    failures: int = 0  #: failed tries of the part in hand (not counting flood control)


@dataclass
class Replies:
    on_ready: Callable[[], None] = lambda: None  #: the sender's kick
    _chats: dict[int, deque[Reply]] = field(default_factory=dict)

    def reserve(self, chat_id: int, reply_to: int | None) -> Reply:
        """A place in `chat_id`'s queue, taken when the command arrives."""
        reply = Reply(chat_id=chat_id, reply_to=reply_to)
        self._chats.setdefault(chat_id, deque()).append(reply)
        return reply

    def fill(
        self, reply: Reply, parts: list[str], markup: InlineKeyboardMarkup | None = None
    ) -> None:
        """The command's answer is ready (no parts: nothing to say, its place is given up)."""
        reply.parts, reply.markup = parts, markup
        self.on_ready()

    def say(self, chat_id: int, reply_to: int | None, parts: list[str]) -> None:
        """An answer ready at once."""
        self.fill(self.reserve(chat_id, reply_to), parts)

    def ready(self) -> list[Reply]:
        """The first answer of each chat, when it is ready."""
        return [q[0] for q in self._chats.values() if q and q[0].parts is not None]

    def done(self, reply: Reply) -> None:
        """`reply` is delivered or given up: the next of its chat may go."""
        queue = self._chats.get(reply.chat_id)
        if queue and queue[0] is reply:
            queue.popleft()
            if not queue:
                del self._chats[reply.chat_id]

    def __len__(self) -> int:
        return sum(len(q) for q in self._chats.values())
