"""The daemon-wide sections of the fleet config: where state is kept (`store`), the playbook,
how repairs run (`remediation`), the probe settings and the other `defaults`, telling people
(`notify`, `notify.telegram`) and the daemon's own HTTP side (`http`)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, field_validator

from supervisor.config.fields import (
    Count,
    Duration,
    FilePath,
    Flag,
    Frozen,
    PositiveDuration,
    Ratio,
    Text,
    field_error,
)
from supervisor.config.messages import render_value

DEFAULT_PROMPT = "What is 17 + 25? Think briefly, then answer with just the number."

_SIZE = re.compile(r"(\d+)\s*(KiB|MiB|GiB)")
_UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_MIN_SPILL = 64 * 1024


def _to_size(value: object) -> int:
    """`512KiB`, `4MiB`, `1GiB` in bytes (at least 64KiB)."""
    found = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    if found is None:
        got = render_value(value)
        raise field_error("range", f"expected a size like 512KiB, 4MiB or 1GiB, got {got}")
    size = int(found[1]) * _UNITS[found[2]]
    if size < _MIN_SPILL:
        raise field_error("range", f"must be at least 64KiB, got {value}")
    return size


Size = Annotated[int, BeforeValidator(_to_size)]
"""A number of bytes, written `512KiB`, `4MiB` or `1GiB`."""


class StoreConfig(Frozen):
    path: FilePath = Field(
        default=Path("state/supervisor.db"),
        description="SQLite database file; a relative path is relative to the config file's folder",
    )
    sample_retention: PositiveDuration = Field(
        default=timedelta(days=7), description="probe samples older than this are pruned"
    )
    url: str | None = Field(
        default=None,
        description="PostgreSQL instead of the SQLite file, shared by every instance: "
        "postgresql+asyncpg://USER@HOST[:PORT]/DB (no password here: password_file or "
        "PGPASSWORD); `?ssl=require` (disable, prefer, verify-full) chooses TLS",
    )
    password_file: FilePath | None = Field(
        default=None, description="file holding the PostgreSQL password (one line)"
    )
    lease: PositiveDuration = Field(
        default=timedelta(seconds=15),
        description="leadership lease: a follower takes over when the leader has not renewed "
        "it for this long (renewed every third of it)",
    )
    instance: str = Field(
        default="",
        description="this instance's name in the leadership journal and in Telegram "
        "(default: the host name)",
    )
    spill_dir: FilePath | None = Field(
        default=None,
        description="folder of the spill file: the writes the store refuses (a full disk, the "
        "database down) are kept there as well as in memory, so that a crash during the outage "
        "loses none (replayed at the next start); best on another filesystem than a SQLite store",
    )
    spill_max: Size = Field(
        default=4 * 1024 * 1024,
        description="the spill file's bound: past it the oldest probe samples are dropped, never "
        "a timeline entry, an attempt or a message (`512KiB`, `4MiB`, `1GiB`)",
    )

    peers: tuple[Text, ...] = Field(
        default=(),
        description="the other instances' HTTP addresses (`http://HOST:PORT`, their "
        "`http.listen`): while the store refuses the leader's renewals it asks each one whether "
        "it leads and reaches the store, and steps down if one does (PostgreSQL only)",
    )
    peer_token_file: FilePath | None = Field(
        default=None,
        description="file holding the token the instances share for that question only (one "
        "line, the same file on each; not readable by others: `chmod o-rwx`); needed with "
        "`peers`",
    )

    @field_validator("peers")
    @classmethod
    def _peer_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            parts = urlsplit(url)
            if (
                parts.scheme not in ("http", "https")
                or not parts.hostname
                or parts.path
                not in (
                    "",
                    "/",
                )
            ):
                raise field_error("url", f"expected http://HOST:PORT, got {url}")
        return tuple(url.rstrip("/") for url in value)

    @field_validator("url")
    @classmethod
    def _pg_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme != "postgresql+asyncpg":
            raise field_error("url", "expected postgresql+asyncpg://USER@HOST[:PORT]/DB")
        if parts.password is not None:
            raise field_error(
                "url", "must not hold a password: give it in store.password_file or PGPASSWORD"
            )
        if not parts.path.strip("/"):
            raise field_error("url", "names no database: postgresql+asyncpg://USER@HOST/DB")
        return value


class PlaybookConfig(Frozen):
    path: FilePath = Field(
        default=Path("playbooks"),
        description="folder of rule files, one YAML file per rule (relative: to the config folder)",
    )


class RemediationConfig(Frozen):
    dry_run: Flag = Field(
        default=False, description="observe and record what would be done, change nothing"
    )
    command_timeout: PositiveDuration = Field(
        default=timedelta(seconds=60), description="deadline for one remediation command"
    )
    evidence_timeout: PositiveDuration = Field(
        default=timedelta(seconds=20), description="deadline for one evidence command"
    )
    max_attempts: Count = Field(
        default=6,
        description="remediation attempts per endpoint within `window`, all rules together",
    )
    window: PositiveDuration = Field(
        default=timedelta(hours=6), description="the window `max_attempts` counts in"
    )
    verify_every: PositiveDuration = Field(
        default=timedelta(seconds=10),
        description="while verifying a repair, a real completion this often",
    )


class ProbeSettings(Frozen):
    liveness_interval: PositiveDuration = Field(
        default=timedelta(seconds=60),
        description="time between liveness probes (`/health`, `/v1/models`, `/api/tags`)",
    )
    completion_interval: PositiveDuration = Field(
        default=timedelta(seconds=300),
        description="time between deep probes (a real completion, embedding or rerank call)",
    )
    timeout: PositiveDuration = Field(
        default=timedelta(seconds=30), description="deadline for one whole probe"
    )
    failures_to_down: Count = Field(
        default=3, description="consecutive failed probes before the endpoint is confirmed down"
    )
    degraded_after: Count = Field(
        default=2,
        description="consecutive degraded deep probes before the endpoint counts as degraded",
    )
    jitter: Duration = Field(
        default=timedelta(seconds=5), description="up to this random delay is added to each probe"
    )
    min_tok_s_ratio: Ratio = Field(
        default=0.5,
        description="a completion slower than this fraction of `baseline_tok_s` is degraded "
        "(more than 0, at most 1)",
    )
    progress_window: Duration = Field(
        default=timedelta(seconds=5),
        description="a failed or slow real check first reads `/metrics` twice this far apart: "
        "busy (tokens flowing) is load, never down; hung (counter frozen) is down at once; "
        "0s: never read",
    )
    max_tokens: Count = Field(default=256, description="token limit of the completion probe")
    prompt: Text = Field(default=DEFAULT_PROMPT, description="the completion probe's question")


class Defaults(Frozen):
    probe: ProbeSettings = Field(
        default=ProbeSettings(), description="probe settings every endpoint starts from"
    )
    startup_grace: Duration = Field(
        default=timedelta(minutes=10),
        description="after a (re)start, how long an endpoint may load before anyone acts",
    )
    reopen_within: Duration = Field(
        default=timedelta(minutes=10),
        description="a problem within this of an incident's close continues that incident "
        "(a flapping endpoint is one incident)",
    )


class TelegramConfig(Frozen):
    token_file: FilePath | None = Field(
        default=None, description="file holding the bot token (else the env var below)"
    )
    token_env: Text = Field(
        default="FLEET_SUPERVISOR_TELEGRAM_TOKEN",
        description="environment variable holding the bot token when there is no token_file",
    )
    chat_ids: tuple[Annotated[int, Field(strict=True)], ...] = Field(
        default=(), description="chats that get alerts and may send commands"
    )
    user_ids: tuple[Annotated[int, Field(strict=True)], ...] = Field(
        default=(), description="users allowed to send commands (in those chats)"
    )
    base_url: Text | None = Field(
        default=None,
        description="Bot API server, e.g. a local one (default: Telegram's); the token is appended",
    )


class NotifyConfig(Frozen):
    telegram: TelegramConfig | None = Field(
        default=None, description="Telegram alerts and commands (off when absent)"
    )
    remind_every: PositiveDuration = Field(
        default=timedelta(minutes=30),
        description="an escalated incident nobody acknowledged is reminded this often",
    )
    busy_after: PositiveDuration = Field(
        default=timedelta(minutes=15),
        description="an endpoint busy this long (saturated: load, never repaired) is told once",
    )
    confirm_timeout: PositiveDuration = Field(
        default=timedelta(minutes=10),
        description="a confirm-mode rule's question times out to skipped after this",
    )


class HttpConfig(Frozen):
    enabled: Flag = Field(
        default=True, description="serve /metrics, /healthz, /status, the control API and the page"
    )
    listen: Text = Field(
        default="127.0.0.1:9464", description="HOST:PORT to listen on (loopback by default)"
    )
    token_file: FilePath | None = Field(
        default=None,
        description="file holding the token the fleet page's actions need (none: read-only)",
    )
    loopback_actions: Flag = Field(
        default=False, description="the page's actions need no token from loopback browsers"
    )
    control_token_file: FilePath | None = Field(
        default=None,
        description="file holding the token the control API (the CLI) must send"
        " (none: any loopback program may call it); readable by the service's group",
    )
