"""The control API over HTTP (served by the daemon's ops server, loopback peers only):

    POST /control/silence    {"target": "ds4", "for": "2h" | "until": ISO-8601, "why": "..."}
    POST /control/unsilence  {"target": "ds4", "why": "..."}
    POST /control/pause      {"endpoint": "ds4" (optional: else fleet-wide), "why": "..."}
    POST /control/resume     {"endpoint": "ds4" (optional), "why": "..."}
    POST /control/ack        {"incident": 12, "why": "..."}
    POST /control/restart    {"endpoint": "ds4", "why": "..."}
    GET  /control/silences   the silences and pauses in force

Who may call: programs on loopback, not browsers, with the token when one is configured
(`supervisor.control.door`); a POST's body must be declared JSON (415 otherwise).
Who acts: the `X-Fleet-Who` header (else `http`); `X-Fleet-Via: cli` marks the CLI. Every answer
is JSON `{"ok": bool, "code": ..., "text": ..., "subjects": [...]}`: 200 done, 409 refused, 404
unknown endpoint/host/incident, 400 bad request, 415 a body not declared JSON.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from supervisor.control._api import ControlApi
from supervisor.control.door import content_refusal
from supervisor.control.model import Answer, Code
from supervisor.core.actor import Actor, Via
from supervisor.core.durations import DurationError, parse_duration
from supervisor.core.timefmt import iso

STATUS = {Code.DONE: 200, Code.REFUSED: 409, Code.NOT_FOUND: 404, Code.BAD_REQUEST: 400}
PREFIX = "/control/"
WHO_HEADER = "x-fleet-who"
VIA_HEADER = "x-fleet-via"

Handler = Callable[[ControlApi, Mapping[str, Any], Actor], Awaitable[Answer]]


class BadRequestError(ValueError):
    """The request's body does not say what the route needs."""


def _text(body: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    value = body.get(key, "")
    if not isinstance(value, str) or (required and not value):
        raise BadRequestError(f"{key!r}: expected a non-empty string")
    return value


def _optional(body: Mapping[str, Any], key: str) -> str | None:
    value = _text(body, key, required=False)
    return value or None


async def _silence(api: ControlApi, body: Mapping[str, Any], actor: Actor) -> Answer:
    target, why = _text(body, "target"), _text(body, "why", required=False)
    if "for" in body and "until" in body:
        raise BadRequestError("give 'for' or 'until', not both")
    if "until" in body:
        try:
            until = datetime.fromisoformat(_text(body, "until"))
        except ValueError:
            raise BadRequestError(
                f"'until': expected an ISO-8601 time, got {body['until']!r}"
            ) from None
        if until.tzinfo is None:
            raise BadRequestError("'until': give a time zone, e.g. 2026-01-31T18:00:00Z")
        return await api.silence(target, actor=actor, why=why, until=until)
    try:
        length = parse_duration(_text(body, "for"))
    except DurationError as exc:
        raise BadRequestError(f"'for': {exc}") from None
    return await api.silence(target, actor=actor, why=why, length=length)


async def _unsilence(api: ControlApi, body: Mapping[str, Any], actor: Actor) -> Answer:
    why = _text(body, "why", required=False)
    return await api.unsilence(_text(body, "target"), actor=actor, why=why)


async def _pause(api: ControlApi, body: Mapping[str, Any], actor: Actor) -> Answer:
    why = _text(body, "why", required=False)
    return await api.pause(actor=actor, endpoint=_optional(body, "endpoint"), why=why)


async def _resume(api: ControlApi, body: Mapping[str, Any], actor: Actor) -> Answer:
    why = _text(body, "why", required=False)
    return await api.resume(actor=actor, endpoint=_optional(body, "endpoint"), why=why)


async def _ack(api: ControlApi, body: Mapping[str, Any], actor: Actor) -> Answer:
    incident = body.get("incident")
    if isinstance(incident, bool) or not isinstance(incident, int):
        raise BadRequestError(f"'incident': expected an incident id (a number), got {incident!r}")
    return await api.ack(incident, actor=actor, why=_text(body, "why", required=False))


async def _restart(api: ControlApi, body: Mapping[str, Any], actor: Actor) -> Answer:
    why = _text(body, "why", required=False)
    return await api.restart(_text(body, "endpoint"), actor=actor, why=why)


ROUTES: dict[str, Handler] = {
    "silence": _silence,
    "unsilence": _unsilence,
    "pause": _pause,
    "resume": _resume,
    "ack": _ack,
    "restart": _restart,
}


def http_actor(headers: Mapping[str, str]) -> Actor:
    via = Via.CLI if headers.get(VIA_HEADER, "").strip().lower() == "cli" else Via.HTTP
    who = headers.get(WHO_HEADER, "").strip()[:100]
    return Actor(who=who or "http", via=via)


def _json(status: int, document: object) -> tuple[int, bytes]:
    return status, json.dumps(document, indent=2).encode()


def _answer(answer: Answer) -> tuple[int, bytes]:
    return _json(
        STATUS[answer.code],
        {
            "ok": answer.ok,
            "code": answer.code.value,
            "text": answer.text,
            "subjects": list(answer.subjects),
        },
    )


def _bad(text: str) -> tuple[int, bytes]:
    return _json(400, {"ok": False, "code": Code.BAD_REQUEST.value, "text": text, "subjects": []})


async def handle(
    api: ControlApi, method: str, path: str, headers: Mapping[str, str], body: bytes
) -> tuple[int, bytes]:
    """(status, JSON body) for one control request."""
    name = path[len(PREFIX) :]
    if name == "silences":
        if method != "GET":
            return _json(405, {"ok": False, "code": "method", "text": "only GET", "subjects": []})
        return _json(200, await listing(api))
    handler = ROUTES.get(name)
    if handler is None:
        known = ", ".join(f"{PREFIX}{n}" for n in [*ROUTES, "silences"])
        return _json(
            404,
            {
                "ok": False,
                "code": Code.NOT_FOUND.value,
                "text": f"not found: {path} (try {known})",
                "subjects": [],
            },
        )
    if method != "POST":
        return _json(
            405,
            {
                "ok": False,
                "code": "method",
                "text": f"method not allowed: {method} (only POST)",
                "subjects": [],
            },
        )
    refused = content_refusal(method, headers)
    if refused is not None:
        return _json(
            refused.status,
            {"ok": False, "code": "media_type", "text": refused.text, "subjects": []},
        )
    try:
        document = json.loads(body or b"{}")
    except ValueError as exc:
        return _bad(f"bad request: the body is not JSON ({exc})")
    if not isinstance(document, dict):
        return _bad("bad request: expected a JSON object")
    try:
        return _answer(await handler(api, document, http_actor(headers)))
    except BadRequestError as exc:
        return _bad(f"bad request: {exc}")


async def listing(api: ControlApi) -> dict[str, Any]:
    """The silences and pauses in force (GET /control/silences)."""
    return {
        "silences": [
            {
                "id": s.id,
                "target": s.target,
                "who": s.who,
                "via": s.via,
                "why": s.why,
                "at": iso(s.at),
                "until": iso(s.until),
            }
            for s in await api.silences()
        ],
        "pauses": [
            {"scope": p.scope, "who": p.who, "via": p.via, "why": p.why, "at": iso(p.at)}
            for p in api.pauses()
        ],
    }
