"""The words of every alert (Telegram HTML: every value escaped) and splitting under 4096."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from html import escape

from supervisor.core.durations import format_duration

MAX_TEXT = 4096
"""Telegram's limit on one message (`telegram.constants.MessageLimit.MAX_TEXT_LENGTH`)."""


def h(value: object) -> str:
    """A value made safe for parse_mode HTML."""
    return escape(str(value), quote=False)


def rounded(delta: timedelta) -> str:
    return format_duration(timedelta(seconds=max(0, round(delta.total_seconds()))))


def number(incident_id: int) -> str:
    """`#12`; an incident the store has not taken yet (a placeholder id) has no number."""
    return f"#{incident_id}" if incident_id >= 0 else "(numbered when the store takes it)"


def opened(
    name: str, state: str, symptom: str, incident_id: int, routes: Sequence[str] = ()
) -> str:
    """`routes`: the endpoints reached through it or served by it, blocked while it fails."""
    behind = (
        f"\nblocked by it while it fails: {h(', '.join(routes))} (no alert per route)"
        if routes
        else ""
    )
    said = f"🔴 <b>{h(name)}</b> is {h(state)}: {h(symptom)}{behind}"
    return f"{said}\nincident {number(incident_id)}"


def host_opened(host: str, reason: str, endpoints: list[str], incident_id: int) -> str:
    served = ", ".join(endpoints) or "none"
    return (
        f"🔴 host <b>{h(host)}</b> does not answer: {h(reason)}\n"
        f"its endpoints are unreachable until it answers: {h(served)} (no alert per endpoint)\n"
        f"incident {number(incident_id)}"
    )


def diagnosis(name: str, line: str) -> str:
    return f"🔎 {h(name)} diagnosis: {h(line)}"


def plan(name: str, line: str) -> str:
    return f"📝 {h(name)}: {h(line)}"


def repairing(name: str, note: str) -> str:
    return f"🔧 repairing {h(name)}: {h(note)}"


def reconsidered(name: str, note: str) -> str:
    """Escalated, new evidence made another rule match: no person needed after all (yet)."""
    return f"🔁 {h(name)}: {h(note)}; repairing without a person"


def repair_result(name: str, ok: bool, line: str) -> str:
    return f"{'✅' if ok else '❌'} {h(name)} repair: {h(line)}"


def escalated(name: str, why: str, runbook: str, incident_id: int, *, host: str = "") -> str:
    """`host`: the endpoint is escalated inside its host's incident (the host stopped answering)."""
    where = f" (host {h(host)})" if host else ""
    lines = [f"🆘 <b>a person is needed</b> on {h(name)}{where}: {h(why)}"]
    if runbook.strip():
        lines.append("runbook:")
        lines += [h(line) for line in runbook.strip().splitlines()]
    lines.append(f"/ack {incident_id} stops the reminders")
    return "\n".join(lines)


def resolved(name: str, took: timedelta, how: str, fixed_by: str, downs: int) -> str:
    head = f"✅ <b>{h(name)}</b> is healthy again after {rounded(took)}"
    if downs > 1:
        head += f" (it went down {downs} times)"
    return f"{head}: {h(how)}\nfixed by: {h(fixed_by or 'nothing we did: it recovered by itself')}"


def busy(name: str, reason: str, lasted: timedelta, incident_id: int) -> str:
    return (
        f"🟡 <b>{h(name)}</b> has been busy for {rounded(lasted)}: {h(reason)}\n"
        "not restarted: a saturated server is load, not a fault (add capacity or shed load)\n"
        f"incident {number(incident_id)}"
    )


def busy_over(name: str, lasted: timedelta) -> str:
    return f"🟢 {h(name)} is no longer busy (it was for {rounded(lasted)})"


def host_resolved(host: str, took: timedelta) -> str:
    return f"✅ host <b>{h(host)}</b> answers again after {rounded(took)}"


def flapping(name: str, downs: int, over: timedelta) -> str:
    return (
        f"🔁 {h(name)} is flapping: down {downs} times in {rounded(over)} "
        "(one incident; next update when it settles)"
    )


def reminder(name: str, why: str, incident_id: int, waiting: timedelta) -> str:
    return (
        f"⏰ still needs a person: {h(name)} (incident {number(incident_id)}, escalated "
        f"{rounded(waiting)} ago): {h(why)}\n/ack {incident_id} stops these reminders"
    )


def split(text: str, limit: int = MAX_TEXT) -> list[str]:
    """Parts of at most `limit` characters, cut at line ends where possible and never inside an
    HTML entity or tag."""
    parts: list[str] = []
    current = ""
    for line in text.split("\n"):
        while len(line) > limit:
            cut = _safe_cut(line, limit)
            if current:
                parts.append(current)
                current = ""
            parts.append(line[:cut])
            line = line[cut:]
        joined = f"{current}\n{line}" if current else line
        if len(joined) > limit:
            parts.append(current)
            current = line
        else:
            current = joined
    if current or not parts:
        parts.append(current)
    return parts


def _safe_cut(line: str, limit: int) -> int:
    cut = limit
    amp, semi = line.rfind("&", 0, cut), line.rfind(";", 0, cut)
    if amp > semi:
        cut = amp
    lt, gt = line.rfind("<", 0, cut), line.rfind(">", 0, cut)
    if lt > gt:
        cut = lt
    return cut if cut > 0 else limit
