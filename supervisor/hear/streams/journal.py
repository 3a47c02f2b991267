"""journald's JSON export, one entry a line (`journalctl -o json`), read into typed entries.

Only the fields the stream asks for (`FIELDS`, via `--output-fields`) are kept; journalctl adds
`__CURSOR`, `__REALTIME_TIMESTAMP`, `__MONOTONIC_TIMESTAMP` and `_BOOT_ID` to every entry. A
line that is not a JSON object with a cursor is malformed: `parse_entry` returns None and the
stream counts it. `MESSAGE` may be an array of bytes (not UTF-8) or null (too large): both are
read, never fatal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

#: The fields asked for: the message, who logged it, and systemd's structured unit fields.
FIELDS: tuple[str, ...] = (
    "MESSAGE",
    "MESSAGE_ID",
    "UNIT",
    "_SYSTEMD_UNIT",
    "_PID",
    "SYSLOG_IDENTIFIER",
    "JOB_TYPE",
    "JOB_RESULT",
    "EXIT_CODE",
    "EXIT_STATUS",
    "UNIT_RESULT",
    "N_RESTARTS",
)


@dataclass(frozen=True, kw_only=True)
class JournalEntry:
    """One journal entry about a unit. `unit` is the unit it is about: `UNIT` for systemd's own
    messages (PID 1 logs them from `init.scope`), else the unit that logged it."""

    cursor: str
    at: datetime
    unit: str
    message: str
    message_id: str = ""
    from_systemd: bool = False  #: logged by PID 1 (systemd) about `unit`
    fields: tuple[tuple[str, str], ...] = ()  #: the other structured fields, as text

    def get(self, name: str) -> str:
        return dict(self.fields).get(name, "")

    def number(self, name: str) -> int | None:
        text = self.get(name)
        return int(text) if text.isascii() and text.lstrip("-").isdigit() else None


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    if value is None:
        return ""
    return None


def _at(value: object) -> datetime | None:
    if not isinstance(value, str) or not (value.isascii() and value.isdigit()):
        return None
    return datetime.fromtimestamp(int(value) / 1_000_000, tz=UTC)


def parse_entry(line: bytes | str) -> JournalEntry | None:
    """The entry on one line of `journalctl -o json`, or None when the line is malformed."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    cursor, at = data.get("__CURSOR"), _at(data.get("__REALTIME_TIMESTAMP"))
    message = _text(data.get("MESSAGE"))
    if not isinstance(cursor, str) or not cursor or at is None or message is None:
        return None
    from_systemd = data.get("_PID") == "1" and isinstance(data.get("UNIT"), str)
    unit = data.get("UNIT") if from_systemd else data.get("_SYSTEMD_UNIT")
    others = tuple(
        (name, text)
        for name in FIELDS[2:]
        if (text := _text(data.get(name))) is not None and name in data
    )
    return JournalEntry(
        cursor=cursor,
        at=at,
        unit=unit if isinstance(unit, str) else "",
        message=message.rstrip("\n"),
        message_id=data.get("MESSAGE_ID", "") if isinstance(data.get("MESSAGE_ID"), str) else "",
        from_systemd=from_systemd,
        fields=others,
    )


def follow_argv(units: Sequence[str], cursor: str | None) -> list[str]:
    """`journalctl -f -o json --cursor=C -u A -u B ...`: every entry about the units from the
    cursor's on, then new ones as they come (without a cursor: only new ones). The entry at the
    cursor itself is printed when it is about the units: the stream drops it (`HostStream`).

    Not `--after-cursor`: journalctl (systemd 252) seeks to the cursor and then steps two matching
    entries, so when the cursor's entry is not about the units (the whole journal's newest entry,
    where a first stream starts) the first entry about them after it is skipped: a stream opened
    just after a unit started never saw the start (tests/lab/test_hostevents.py)."""
    start = f"--cursor={cursor}" if cursor else "--lines=0"
    return [
        "journalctl",
        "--follow",
        "--no-pager",
        "--quiet",
        "--output=json",
        f"--output-fields={','.join(FIELDS)}",
        start,
        *(f"--unit={unit}" for unit in units),
    ]


def head_argv() -> list[str]:
    """The cursor of the newest entry of the whole journal: where a first stream starts."""
    return [
        "journalctl",
        "--no-pager",
        "--quiet",
        "--lines=1",
        "--output=json",
        "--output-fields=__CURSOR",
    ]


def head_cursor(stdout: str) -> str | None:
    """The cursor `head_argv` printed (None when the journal printed no entry)."""
    entries = [parse_entry(line) for line in stdout.splitlines() if line.strip()]
    cursors = [entry.cursor for entry in entries if entry is not None]
    return cursors[-1] if cursors else None
