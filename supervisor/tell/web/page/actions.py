"""The page's actions: a posted form -> one call of the control API as the signed-in person
(`Via.WEB`), its answer shown as it is. The API journals every call (done or refused) with who
did it; a form the gate refuses (no session, wrong CSRF token, another site) never reaches it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta

from supervisor.control import ControlApi
from supervisor.control.model import Answer, Code
from supervisor.core.actor import Actor
from supervisor.core.durations import DurationError, parse_duration

Form = Mapping[str, str]
Action = Callable[[ControlApi, Form, Actor], Awaitable[Answer]]


def _bad(text: str) -> Answer:
    return Answer(code=Code.BAD_REQUEST, text=text)


def _field(form: Form, key: str) -> str:
    return form.get(key, "").strip()


class EndError(ValueError):
    """The form's end time cannot be read."""


def _end(form: Form) -> tuple[timedelta | None, datetime | None]:
    """(length, until) from the form: a picked local time (`until_local`, with the browser's
    `tz_offset` in minutes, as JavaScript's getTimezoneOffset says; UTC without it), else a
    length (`for`: a preset or typed, e.g. 2h)."""
    local = _field(form, "until_local")
    if local:
        try:
            picked = datetime.fromisoformat(local)
            offset = int(_field(form, "tz_offset") or "0")
        except ValueError:
            raise EndError(f"until: expected a date and time, got {local!r}") from None
        if picked.tzinfo is None:
            picked = picked.replace(tzinfo=UTC) + timedelta(minutes=offset)
        return None, picked
    try:
        return parse_duration(_field(form, "for") or "?"), None
    except DurationError as exc:
        raise EndError(f"for how long: {exc}") from None


NEEDS_A_REASON = "say why: a silence needs a reason (it is shown to everyone it hides)"


async def _silence(api: ControlApi, form: Form, actor: Actor) -> Answer:
    target = _field(form, "target")
    if not target:
        return _bad("say what to silence: an endpoint, a glob, host:NAME or all")
    why = _field(form, "why")
    if not why:
        return _bad(NEEDS_A_REASON)
    try:
        length, until = _end(form)
    except EndError as exc:
        return _bad(str(exc))
    return await api.silence(target, actor=actor, why=why, length=length, until=until)


async def _edit(api: ControlApi, form: Form, actor: Actor) -> Answer:
    number = _field(form, "silence").lstrip("#")
    if not (number.isascii() and number.isdigit()):
        return _bad(f"which silence: expected its number, got {number!r}")
    why = _field(form, "why")
    if not why:
        return _bad(NEEDS_A_REASON)
    try:
        length, until = _end(form)
    except EndError as exc:
        return _bad(str(exc))
    return await api.edit(int(number), actor=actor, why=why, length=length, until=until)


async def _unsilence(api: ControlApi, form: Form, actor: Actor) -> Answer:
    target = _field(form, "target")
    if not target:
        return _bad("say what to unsilence")
    return await api.unsilence(target, actor=actor, why=_field(form, "why"))


async def _pause(api: ControlApi, form: Form, actor: Actor) -> Answer:
    endpoint = _field(form, "endpoint") or None
    return await api.pause(actor=actor, endpoint=endpoint, why=_field(form, "why"))


async def _resume(api: ControlApi, form: Form, actor: Actor) -> Answer:
    endpoint = _field(form, "endpoint") or None
    return await api.resume(actor=actor, endpoint=endpoint, why=_field(form, "why"))


async def _ack(api: ControlApi, form: Form, actor: Actor) -> Answer:
    incident = _field(form, "incident")
    if not (incident.isascii() and incident.isdigit()):
        return _bad(f"which incident: expected its number, got {incident!r}")
    return await api.ack(int(incident), actor=actor, why=_field(form, "why"))


async def _restart(api: ControlApi, form: Form, actor: Actor) -> Answer:
    endpoint = _field(form, "endpoint")
    if not endpoint:
        return _bad("say which endpoint to restart")
    return await api.restart(endpoint, actor=actor, why=_field(form, "why"))


ACTIONS: Mapping[str, Action] = {
    "silence": _silence,
    "edit": _edit,
    "unsilence": _unsilence,
    "pause": _pause,
    "resume": _resume,
    "ack": _ack,
    "restart": _restart,
}

CONFIRM = frozenset({"restart"})
"""Actions the page asks to confirm (a second form with `confirm=yes`) before doing them."""
