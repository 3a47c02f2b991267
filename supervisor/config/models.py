"""The fleet config as typed, frozen models: what the rest of the daemon reads.

Field descriptions feed `docs/config-table.md` (see `supervisor.config.doctable`). Numbers and
booleans are strict (YAML already types them; `"3"` or `1` for a flag is a mistake, not a value).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from supervisor.config.messages import render_value
from supervisor.durations import DurationError, format_duration, parse_duration

EndpointKind = Literal["openai", "ollama", "health", "embedding", "rerank"]
MODEL_KINDS: frozenset[str] = frozenset({"openai", "ollama", "embedding", "rerank"})
"""Kinds whose probe names a model, so `model` is required."""
COMPLETION_KINDS: frozenset[str] = frozenset({"openai", "ollama"})
"""Kinds probed with a real chat completion (reasoning text, tokens per second)."""


def _fail(kind: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(kind, "{message}", {"message": message})


def _to_duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except DurationError as exc:
            raise _fail("duration", str(exc)) from None
    got = render_value(value)
    raise _fail("duration", f"expected a duration like 90s, 15m or 2h, got {got}")


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        got = format_duration(value) if value else "0s"
        raise _fail("duration", f"must be longer than 0s, got {got}")
    return value


def expand_home(path: Path) -> Path:
    """`~/x` -> `/home/me/x`; unchanged when there is no home directory to expand to."""
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def _to_path(value: object) -> Path:
    if isinstance(value, Path):
        return value
    if isinstance(value, str) and value.strip():
        return expand_home(Path(value))
    raise _fail("path", f"expected a file path, got {render_value(value)}")


def _between(low: int, high: int) -> AfterValidator:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise _fail("range", f"must be between {low} and {high}, got {value}")
        return value

    return AfterValidator(check)


def _ratio(value: float) -> float:
    if not 0 < value <= 1:
        raise _fail("range", f"must be more than 0 and at most 1, got {render_value(value)}")
    return value


Duration = Annotated[timedelta, BeforeValidator(_to_duration)]
PositiveDuration = Annotated[timedelta, BeforeValidator(_to_duration), AfterValidator(_positive)]
FilePath = Annotated[Path, BeforeValidator(_to_path)]
Text = Annotated[str, Field(strict=True, min_length=1)]
Flag = Annotated[bool, Field(strict=True)]
Count = Annotated[int, Field(strict=True, ge=1)]
Port = Annotated[int, Field(strict=True), _between(1, 65535)]
Ratio = Annotated[float, Field(strict=True, allow_inf_nan=False), AfterValidator(_ratio)]
Rate = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]

DEFAULT_PROMPT = "What is 17 + 25? Think briefly, then answer with just the number."


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StoreConfig(_Frozen):
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
        "PGPASSWORD)",
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

    @field_validator("url")
    @classmethod
    def _pg_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme != "postgresql+asyncpg":
            raise _fail("url", "expected postgresql+asyncpg://USER@HOST[:PORT]/DB")
        if parts.password is not None:
            raise _fail(
                "url", "must not hold a password: give it in store.password_file or PGPASSWORD"
            )
        if not parts.path.strip("/"):
            raise _fail("url", "names no database: postgresql+asyncpg://USER@HOST/DB")
        return value


class PlaybookConfig(_Frozen):
    path: FilePath = Field(
        default=Path("playbooks"),
        description="folder of rule files, one YAML file per rule (relative: to the config folder)",
    )


class RemediationConfig(_Frozen):
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


class ProbeSettings(_Frozen):
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


class Defaults(_Frozen):
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


class TelegramConfig(_Frozen):
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


class NotifyConfig(_Frozen):
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


class HttpConfig(_Frozen):
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


class Host(_Frozen):
    name: str = Field(description="the host's key under `hosts`")
    address: Text | None = Field(default=None, description="SSH address (IP or DNS name)")
    user: Text | None = Field(default=None, description="SSH user (default: the SSH client's)")
    port: Port = Field(default=22, description="SSH port (1-65535)")
    key: FilePath | None = Field(
        default=None, description="SSH private key file (relative: to the config's folder)"
    )
    known_hosts: FilePath | None = Field(
        default=None, description="known_hosts file (default: the SSH client's)"
    )
    check_host_key: Flag = Field(default=True, description="verify the host's SSH key")
    local: Flag = Field(
        default=False, description="the box the daemon runs on: commands run without SSH"
    )
    service_manager: Literal["systemd", "launchd"] = Field(
        default="systemd", description="how services are managed: `systemd` or `launchd`"
    )


class UnitRef(_Frozen):
    host: Text = Field(description="the host the unit runs on (a key under `hosts`)")
    unit: Text = Field(
        description="the service unit, e.g. `vllm-ds4-head.service`; on a launchd host the "
        "job's label, e.g. `com.fleet.mlx-kimi`"
    )
    domain: Text | None = Field(
        default=None,
        description="launchd hosts only, required there: `gui/<uid>` (a LaunchAgent), "
        "`user/<uid>` or `system` (a LaunchDaemon)",
    )
    plist: Text | None = Field(
        default=None,
        description="launchd hosts only, required there: the job's plist on the Mac (absolute, "
        "or `~/` for the SSH user's home), for `launchctl bootstrap`",
    )
    container: Text | None = Field(default=None, description="docker container the unit runs")
    known_good: Text | None = Field(
        default=None, description="the known-good launch script or command for this unit"
    )


class Endpoint(_Frozen):
    name: str = Field(description="the endpoint's key under `endpoints`")
    kind: EndpointKind = Field(description="`openai`, `ollama`, `health`, `embedding` or `rerank`")
    url: Text = Field(
        description="base URL, `http://` or `https://` (for `health`: the URL to GET)"
    )
    model: Text | None = Field(
        default=None,
        description="model name the probes ask for, as the server lists it",
    )
    expect_reasoning: Flag = Field(
        default=False, description="the completion must return reasoning text (openai, ollama)"
    )
    baseline_tok_s: Rate | None = Field(
        default=None, description="normal decode tokens per second (openai, ollama); more than 0"
    )
    startup_grace: Duration = Field(
        default=timedelta(minutes=10), description="startup grace for this endpoint"
    )
    host: Text | None = Field(
        default=None,
        description="the host serving it (a key under `hosts`), for endpoints without units",
    )
    units: tuple[UnitRef, ...] = Field(
        default=(), description="the service units that serve it, in restart order"
    )
    probe: ProbeSettings = Field(
        default=ProbeSettings(),
        description="any `defaults.probe` key, for this endpoint only; the others are inherited",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        stripped = value.rstrip("/")
        try:
            parts = urlsplit(stripped)
            _ = parts.port  # raises ValueError for a port that is not a number in range
            valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            valid = False
        if not valid or any(char.isspace() for char in value):
            message = f"expected an http:// or https:// URL, got {render_value(value)}"
            raise _fail("url", message)
        return stripped

    def hosts(self) -> tuple[str, ...]:
        """The hosts that serve this endpoint: unit hosts in order, then `host`, no repeats."""
        names = [unit.host for unit in self.units]
        if self.host is not None:
            names.append(self.host)
        return tuple(dict.fromkeys(names))


class UnknownEndpointError(KeyError):
    """`FleetConfig.endpoint` was asked for a name the config does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


class FleetConfig(_Frozen):
    source: Path = Field(description="the config file it came from")
    store: StoreConfig = Field(
        default=StoreConfig(), description="where the daemon keeps its state"
    )
    defaults: Defaults = Field(default=Defaults(), description="settings every endpoint inherits")
    playbook: PlaybookConfig = Field(default=PlaybookConfig(), description="the rule playbook")
    notify: NotifyConfig = Field(default=NotifyConfig(), description="telling people")
    http: HttpConfig = Field(default=HttpConfig(), description="the daemon's own HTTP endpoint")
    remediation: RemediationConfig = Field(
        default=RemediationConfig(), description="how repairs are run and limited"
    )
    hosts: Mapping[str, Host] = Field(
        default_factory=dict, description="machines, by name (letters, digits, `.`, `_`, `-`)"
    )
    endpoints: Mapping[str, Endpoint] = Field(
        default_factory=dict,
        description="served things to supervise, by name (letters, digits, `.`, `_`, `-`)",
    )

    def endpoint(self, name: str) -> Endpoint:
        """The endpoint called `name`; `KeyError` naming the known endpoints otherwise."""
        try:
            return self.endpoints[name]
        except KeyError:
            known = ", ".join(sorted(self.endpoints)) or "none"
            raise UnknownEndpointError(f"unknown endpoint {name!r} (endpoints: {known})") from None
