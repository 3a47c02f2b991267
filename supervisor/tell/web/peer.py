"""The peers' question on an instance's HTTP side (`supervisor.core.peers`): `GET /peer`, the
shared token in `Authorization: Bearer`, answered by a leader and a follower alike, before any
other check (a cut-off or deposed instance answers it too: that it does not lead)."""

from __future__ import annotations

from aiohttp import web

from supervisor.core.peers import PATH, PeerDoor, authorized
from supervisor.tell.web.site import get_only, text

UNAUTHORIZED = "unauthorized: the peers' question needs the shared token (store.peer_token_file)"


def mount_peer(app: web.Application, door: PeerDoor | None) -> None:
    """Add the route when this instance has the token (`store.peer_token_file`)."""
    if door is None:
        return

    async def answer(request: web.Request) -> web.Response:
        if not authorized(request.headers.get("Authorization"), door.token):
            return text(401, UNAUTHORIZED)
        return web.json_response((await door.answer()).document())

    app.router.add_route("*", PATH, get_only(answer))


def is_peer_question(request: web.Request) -> bool:
    """Whether `request` asks the peers' question (the leadership checks let it through)."""
    return request.path == PATH
