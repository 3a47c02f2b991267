"""HTTP helpers for the checks: requests to the endpoint's server, and answers in plain words."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote, urlsplit

from supervisor.core.durations import format_duration
from supervisor.core.httpclient import WholeReply
from supervisor.probe.context import ProbeContext, ProbeError

_EXCERPT = 60
_ERROR_TEXT = 200


def one_line(text: str) -> str:
    return " ".join(text.split())


def excerpt(text: str, limit: int = _EXCERPT) -> str:
    """The first `limit` characters of `text` on one line, with `…` when cut."""
    flat = one_line(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ProbeError(f"bad JSON in response: {excerpt(text) or '(empty)'}") from None


def server_error_text(body: str) -> str:
    """What the server said went wrong: `error.message`, `detail` or `message`, else the text."""
    try:
        data = json.loads(body)
    except ValueError:
        return one_line(body)[:_ERROR_TEXT].rstrip()
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return one_line(error["message"])
        for value in (error, data.get("detail"), data.get("message")):
            if isinstance(value, str) and value.strip():
                return one_line(value)
    return one_line(body)[:_ERROR_TEXT].rstrip()


def http_error_reason(status: int, body: str, *, where: str | None = None) -> str:
    """`HTTP 503 from /health`, `HTTP 500: EngineCore encountered an issue. …`, `HTTP 503`."""
    head = f"HTTP {status}" if where is None else f"HTTP {status} from {where}"
    message = server_error_text(body) if body.strip() else ""
    return f"{head}: {message}" if message else head


KEY_REFUSED = "the server refused the key"
KEY_ASKED = "the server asks for a key"


def refused_reason(ctx: ProbeContext, status: int, body: str, *, where: str | None = None) -> str:
    """`http_error_reason`, but a 401 or 403 in plain words about the key: refused (one was
    sent: `the server refused the key from /etc/fleet/x.key (HTTP 401)`) or asked for (none was:
    `the server asks for a key (HTTP 401): set endpoints.NAME.api_key_file`). The server's own
    text is left out of those (a proxy may echo what it was sent)."""
    endpoint = ctx.endpoint
    if status not in (401, 403):
        return http_error_reason(status, body, where=where)
    if endpoint.keyed:
        return f"{KEY_REFUSED} from {endpoint.key_source} (HTTP {status})"
    return f"{KEY_ASKED} (HTTP {status}): set endpoints.{endpoint.name}.api_key_file"


def timed_out_reason(timeout_s: float) -> str:
    return f"timed out after {format_duration(timeout_s)}"


def url_path(url: str) -> str:
    """The path of a URL, for `HTTP 503 from /health`."""
    return unquote(urlsplit(url).path) or "/"


async def get_ok(ctx: ProbeContext, url: str) -> WholeReply:
    """GET `url` (on the endpoint's server); anything but 2xx is a failure naming the path."""
    response = await ctx.client.get(url, headers=ctx.headers)
    ctx.http_status = response.status_code
    if not response.is_success:
        reason = refused_reason(ctx, response.status_code, response.text, where=url_path(url))
        raise ProbeError(reason, http_status=response.status_code)
    return response


async def get_json(ctx: ProbeContext, url: str) -> Any:
    return parse_json((await get_ok(ctx, url)).text)


async def post_json(ctx: ProbeContext, url: str, payload: dict[str, Any]) -> Any:
    """POST a JSON body and return the parsed JSON answer; non-2xx is `HTTP 500: message`."""
    response = await ctx.client.post(url, json=payload, headers=ctx.headers)
    ctx.http_status = response.status_code
    if not response.is_success:
        reason = refused_reason(ctx, response.status_code, response.text)
        raise ProbeError(reason, http_status=response.status_code)
    return parse_json(response.text)
