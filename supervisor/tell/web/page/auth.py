"""Who may act from the page. Read-only unless `http.token_file` names a file holding a token
(or `http.loopback_actions` lets loopback browsers act without one). Signing in (the token and a
name) starts a session: a random id in an HttpOnly, SameSite=Strict cookie, and a CSRF token the
page puts in every form. An action needs the session, its CSRF token and a same-origin request
(the browser's Origin, else Referer, names the host the page was served from)."""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from supervisor.core.actor import Actor, Via
from supervisor.tell.web.page.peers import is_loopback

COOKIE = "fleet_session"
MAX_SESSIONS = 256


class RefusedError(Exception):
    """An action the page will not do: the reason is one sentence for the person."""


@dataclass(frozen=True, kw_only=True)
class Session:
    who: str
    csrf: str

    @property
    def actor(self) -> Actor:
        return Actor(who=self.who, via=Via.WEB)


class ActionGate:
    def __init__(self, *, token_file: Path | None, loopback_actions: bool) -> None:
        self.token_file = token_file
        self.loopback_actions = loopback_actions
        self._sessions: dict[str, Session] = {}

    def enabled(self, peer_loopback: bool) -> bool:
        """Whether this browser may act at all (after signing in)."""
        return self.token_file is not None or (self.loopback_actions and peer_loopback)

    def _token(self) -> str:
        if self.token_file is None:
            return ""
        try:
            return self.token_file.read_text().strip()
        except OSError as exc:
            raise RefusedError(f"cannot read http.token_file {self.token_file}: {exc}") from None

    def session(self, request: web.Request) -> Session | None:
        return self._sessions.get(request.cookies.get(COOKIE, ""))

    def sign_in(self, request: web.Request, who: str, token: str) -> tuple[str, Session]:
        """A new session (its cookie value) for `who`, when the token is right (or not needed)."""
        same_origin(request)
        peer_loopback = _loopback(request)
        if not self.enabled(peer_loopback):
            raise RefusedError("the page is read-only: set http.token_file to allow actions")
        who = who.strip()[:60]
        if not who:
            raise RefusedError("give your name: every action is recorded with who did it")
        needs_token = not (self.loopback_actions and peer_loopback)
        expected = self._token() if needs_token else ""
        if needs_token and (not expected or not same_secret(token, expected)):
            raise RefusedError("wrong token: nothing was done")
        if len(self._sessions) >= MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        sid = secrets.token_urlsafe(32)
        session = Session(who=who, csrf=secrets.token_urlsafe(32))
        self._sessions[sid] = session
        return sid, session

    def sign_out(self, request: web.Request) -> None:
        self._sessions.pop(request.cookies.get(COOKIE, ""), None)

    def check(self, request: web.Request, csrf: str) -> Session:
        """The session an action runs under; RefusedError when it may not run."""
        same_origin(request)
        if not self.enabled(_loopback(request)):
            raise RefusedError("the page is read-only: set http.token_file to allow actions")
        session = self.session(request)
        if session is None:
            raise RefusedError("sign in with the token first: nothing was done")
        if not same_secret(csrf, session.csrf):
            raise RefusedError("the form's CSRF token does not match your session: reload the page")
        return session


def same_secret(given: str, expected: str) -> bool:
    """Whether `given` is `expected`, in constant time, whatever characters a person typed
    (`hmac.compare_digest` refuses str holding non-ASCII: compared as UTF-8 bytes)."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def same_origin(request: web.Request) -> None:
    """RefusedError unless the browser says the request comes from a page of this server."""
    source = request.headers.get("Origin") or request.headers.get("Referer") or ""
    if not source or source == "null":
        raise RefusedError("the request does not say where it comes from (no Origin): refused")
    try:
        netloc = urlsplit(source).netloc
    except ValueError:  # e.g. `http://[::1` (an unclosed IPv6 address)
        netloc = ""
    if netloc != request.host:
        raise RefusedError(f"the request comes from another site ({source[:200]}): refused")


def _loopback(request: web.Request) -> bool:
    return is_loopback(request.remote or "")
