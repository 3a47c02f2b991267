"""A local Telegram Bot API server over real HTTP (the cloud cannot run here: the lab, the demo,
the benchmarks and the tests use this), for the real python-telegram-bot client (pointed at it
with `base_url`). It answers getMe, sendMessage, editMessageText,
answerCallbackQuery, setMyCommands, deleteWebhook and getUpdates (long-polling the updates a
test queues: messages and button presses), records what the bot sent, and can be switched down
(connection refused, or 502 Bad Gateway) and back up on the same port, or made to fail only
some methods (`failing`: e.g. sendMessage answered 502 while the bot still polls), or flood
control on replies (`flood_replies`: the next N sendMessage calls that reply to a message are
answered 429 `Too Many Requests: retry after S` with `parameters.retry_after`, as Telegram
does)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs

from fleet_lab.vllm_sim.http import Request, Responder, read_request

BOT_ID = 4242
BOT_USERNAME = "fleet_test_bot"


@dataclass(kw_only=True)
class Sent:
    """One sendMessage the bot made."""

    chat_id: int
    message_id: int
    text: str
    parse_mode: str | None
    reply_to: int | None
    buttons: list[tuple[str, str]]  #: (label, callback_data)
    received_at: float = field(default_factory=time.time)  #: when the stub took it (epoch s)


@dataclass(kw_only=True)
class BotApiStub:
    token: str
    sent: list[Sent] = field(default_factory=list)
    edits: list[tuple[int, int, str]] = field(default_factory=list)  #: (chat, message, text)
    answers: list[tuple[str, str]] = field(default_factory=list)  #: (query id, text)
    commands: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    mode: Literal["up", "refused", "502"] = "up"
    #: methods answered 502 Bad Gateway (as JSON) while up: recorded in `calls`, not carried out
    failing: set[str] = field(default_factory=set)
    flood_replies: int = 0  #: the next N replies are answered 429 (then counted down)
    retry_after: int = 1  #: seconds the 429 asks for (Telegram gives whole seconds)
    flooded: list[float] = field(default_factory=list)  #: when each 429 was given (epoch s)
    flood_updates: int = 0  #: the next N getUpdates are answered 429 (then counted down)
    _server: asyncio.Server | None = None
    _port: int = 0
    _updates: list[dict[str, Any]] = field(default_factory=list)
    _new_update: asyncio.Event = field(default_factory=asyncio.Event)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _update_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _connections: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/bot"

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._on_connection, "127.0.0.1", port)
        self._port = self._server.sockets[0].getsockname()[1]
        self.mode = "up"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def down(self, how: Literal["refused", "502"] = "refused") -> None:
        if how == "refused":
            await self.stop()
        self.mode = how

    async def up(self) -> None:
        if self._server is None:
            await self.start(self._port)
        self.mode = "up"

    # -- what a test feeds ------------------------------------------------------------------

    def message(self, *, chat_id: int, user_id: int, text: str, username: str = "op") -> int:
        """Someone writes `text` in the chat (a leading /word is a command); returns its id."""
        message_id = next(self._ids)
        body: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": _chat(chat_id),
            "from": {"id": user_id, "is_bot": False, "first_name": username, "username": username},
            "text": text,
        }
        if text.startswith("/"):
            word = text.split()[0]
            body["entities"] = [{"type": "bot_command", "offset": 0, "length": len(word)}]
        self._push({"message": body})
        return message_id

    def press(self, sent: Sent, label: str, *, user_id: int, username: str = "op") -> None:
        """Someone presses the button labelled `label` under a message the bot sent."""
        data = dict(sent.buttons)[label]
        self._push(
            {
                "callback_query": {
                    "id": str(next(self._ids)),
                    "from": {
                        "id": user_id,
                        "is_bot": False,
                        "first_name": username,
                        "username": username,
                    },
                    "chat_instance": "1",
                    "data": data,
                    "message": self._message(sent.chat_id, sent.message_id, sent.text),
                }
            }
        )

    def _push(self, update: dict[str, Any]) -> None:
        self._updates.append({"update_id": next(self._update_ids), **update})
        self._new_update.set()

    def texts(self, chat_id: int | None = None) -> list[str]:
        return [s.text for s in self.sent if chat_id is None or s.chat_id == chat_id]

    # -- HTTP --------------------------------------------------------------------------------

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            while (request := await read_request(reader)) is not None:
                out = Responder(writer, server="botapi-stub", keep_alive=request.keep_alive)
                await self._route(request, out)
                if not out.keep_alive:
                    break
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _route(self, request: Request, out: Responder) -> None:
        if self.mode == "502":
            await out.send_text(502, "Bad Gateway")
            return
        prefix = f"/bot{self.token}/"
        if not request.path.startswith(prefix):
            await out.send_json(401, _error(401, "Unauthorized"))
            return
        method = request.path[len(prefix) :]
        params = _params(request)
        self.calls.append(method)
        if method in self.failing:
            await out.send_json(502, _error(502, "Bad Gateway"))
            return
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            await out.send_json(404, _error(404, "Not Found: method not found"))
            return
        result = await handler(params)
        if isinstance(result, tuple):
            error = _error(*result)
            if result[0] == 429:
                error["parameters"] = {"retry_after": self.retry_after}
            await out.send_json(result[0], error)
            return
        await out.send_json(200, {"ok": True, "result": result})

    async def _api_getMe(self, _p: dict[str, Any]) -> Any:  # noqa: N802
        return {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "fleet",
            "username": BOT_USERNAME,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _api_deleteWebhook(self, _p: dict[str, Any]) -> Any:  # noqa: N802
        return True

    async def _api_setMyCommands(self, p: dict[str, Any]) -> Any:  # noqa: N802
        self.commands = [c["command"] for c in p["commands"]]
        return True

    async def _api_answerCallbackQuery(self, p: dict[str, Any]) -> Any:  # noqa: N802
        self.answers.append((str(p["callback_query_id"]), str(p.get("text", ""))))
        return True

    async def _api_sendMessage(self, p: dict[str, Any]) -> Any:  # noqa: N802
        text = str(p["text"])
        if len(text) > 4096:
            return (400, "Bad Request: message is too long")
        chat_id = int(p["chat_id"])
        reply = p.get("reply_parameters") or {}
        if reply and self.flood_replies > 0:
            self.flood_replies -= 1
            self.flooded.append(time.time())
            return (429, f"Too Many Requests: retry after {self.retry_after}")
        markup = p.get("reply_markup") or {}
        buttons = [
            (b["text"], b["callback_data"])
            for row in markup.get("inline_keyboard", [])
            for b in row
        ]
        sent = Sent(
            chat_id=chat_id,
            message_id=next(self._ids),
            text=text,
            parse_mode=p.get("parse_mode"),
            reply_to=reply.get("message_id"),
            buttons=buttons,
        )
        self.sent.append(sent)
        return self._message(chat_id, sent.message_id, text)

    async def _api_editMessageText(self, p: dict[str, Any]) -> Any:  # noqa: N802
        chat_id, message_id = int(p["chat_id"]), int(p["message_id"])
        self.edits.append((chat_id, message_id, str(p["text"])))
        return self._message(chat_id, message_id, str(p["text"]))

    async def _api_getUpdates(self, p: dict[str, Any]) -> Any:  # noqa: N802
        if self.flood_updates > 0:
            self.flood_updates -= 1
            self.flooded.append(time.time())
            return (429, f"Too Many Requests: retry after {self.retry_after}")
        offset = int(p.get("offset") or 0)
        self._updates = [u for u in self._updates if u["update_id"] >= offset]
        if not self._updates:
            self._new_update.clear()
            wait = min(float(p.get("timeout") or 0), 0.3)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._new_update.wait()
        return list(self._updates)

    def _message(self, chat_id: int, message_id: int, text: str) -> dict[str, Any]:
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": _chat(chat_id),
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "fleet", "username": BOT_USERNAME},
            "text": text,
        }


def _chat(chat_id: int) -> dict[str, Any]:
    if chat_id < 0:
        return {"id": chat_id, "type": "group", "title": "ops"}
    return {"id": chat_id, "type": "private", "first_name": "op"}


def _error(code: int, description: str) -> dict[str, Any]:
    return {"ok": False, "error_code": code, "description": description}


def _params(request: Request) -> dict[str, Any]:
    """ptb posts form fields; objects and lists come JSON-encoded inside them."""
    kind = request.headers.get("content-type", "")
    if "json" in kind:
        data: dict[str, Any] = json.loads(request.body or b"{}")
        return data
    fields = parse_qs(request.body.decode(), keep_blank_values=True)
    out: dict[str, Any] = {}
    for name, values in fields.items():
        value = values[-1]
        try:
            out[name] = json.loads(value) if value[:1] in "[{" else value
        except ValueError:
            out[name] = value
    return out
