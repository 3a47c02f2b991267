"""Who may call the control API over HTTP, before any route reads the body: programs, not
browsers, and (when `http.control_token_file` is set) only those holding its token.

A browser on the daemon's box (or at the end of an `ssh -L` tunnel) is a loopback peer, and a
page of any site can make it POST without a preflight (a `text/plain` body, a form). Such a
request always says where it comes from: browsers send `Origin` on every cross-origin or POST
fetch and `Sec-Fetch-Site` on every request (`none` only when a person typed the address).
The CLI sends neither. So a request carrying an `Origin`, or a `Sec-Fetch-Site` other than
`none`, is refused (403); a POST must say `Content-Type: application/json` (415), which a page
cannot send to another origin without a CORS preflight that this API never grants; and with a
token file, `Authorization: Bearer TOKEN` must name its token (401)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

AUTHORIZATION = "authorization"
SCHEME = "Bearer "


@dataclass(frozen=True, kw_only=True)
class DoorRefusal:
    status: int
    text: str


def browser_refusal(headers: Mapping[str, str]) -> DoorRefusal | None:
    """403 when a browser sent the request (an `Origin`, or `Sec-Fetch-Site` other than none)."""
    origin = headers.get("origin")
    if origin is not None:
        return DoorRefusal(
            status=403,
            text=f"forbidden: the control API does not answer browsers (Origin: {origin[:100]}); "
            "use the CLI, or the fleet page's actions",
        )
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() != "none":
        return DoorRefusal(
            status=403,
            text=f"forbidden: the control API does not answer browsers (Sec-Fetch-Site: "
            f"{site[:40]}); use the CLI, or the fleet page's actions",
        )
    return None


def content_refusal(method: str, headers: Mapping[str, str]) -> DoorRefusal | None:
    """415 for a POST whose body is not declared JSON."""
    if method != "POST":
        return None
    kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind == "application/json":
        return None
    return DoorRefusal(
        status=415,
        text=f"unsupported media type: {kind or 'none'}; send the body as JSON "
        "(Content-Type: application/json)",
    )


def read_token(path: Path) -> bytes:
    """The token in `path` (surrounding white space dropped); OSError when unreadable."""
    return path.read_bytes().strip()


def token_refusal(token_file: Path | None, headers: Mapping[str, str]) -> DoorRefusal | None:
    """401 unless the request names the token of `token_file` (none configured: no token)."""
    if token_file is None:
        return None
    try:
        expected = read_token(token_file)
    except OSError as exc:
        return DoorRefusal(
            status=503,
            text=f"unavailable: cannot read http.control_token_file {token_file}: "
            f"{exc.strerror or exc}",
        )
    if not expected:
        return DoorRefusal(
            status=503, text=f"unavailable: http.control_token_file {token_file} is empty"
        )
    said = headers.get(AUTHORIZATION, "")
    given = said[len(SCHEME) :].strip() if said.startswith(SCHEME) else ""
    if not given:
        return DoorRefusal(
            status=401,
            text="unauthorized: the control API needs its token "
            "(Authorization: Bearer TOKEN, from http.control_token_file)",
        )
    if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected):
        return DoorRefusal(status=401, text="unauthorized: wrong token")
    return None


def refusal(headers: Mapping[str, str], token_file: Path | None) -> DoorRefusal | None:
    """Why the control API does not answer this request at all (a browser, no token); None
    when it does. (The content type is checked once the route is known: `content_refusal`.)"""
    return browser_refusal(headers) or token_refusal(token_file, headers)
