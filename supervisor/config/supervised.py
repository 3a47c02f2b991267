"""What the fleet config supervises: the hosts, the service units on them, and the endpoints
they serve (each with its kind, URL, model and its own probe settings)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, SecretStr, field_validator

from supervisor.config.fields import (
    Duration,
    EnvName,
    FilePath,
    Flag,
    Frozen,
    HeaderName,
    HeaderValue,
    Port,
    Rate,
    Text,
    field_error,
)
from supervisor.config.messages import render_value
from supervisor.config.sections import ProbeSettings

EndpointKind = Literal["openai", "ollama", "health", "embedding", "rerank", "asr", "tts"]
MODEL_KINDS: frozenset[str] = frozenset({"openai", "ollama", "embedding", "rerank", "asr", "tts"})
"""Kinds whose probe names a model, so `model` is required."""
COMPLETION_KINDS: frozenset[str] = frozenset({"openai", "ollama"})
"""Kinds probed with a real chat completion (reasoning text, tokens per second)."""


class Host(Frozen):
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


class UnitRef(Frozen):
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


class AsrListener(Frozen):
    """An ASR server that must hear what a `tts` endpoint says (a round trip)."""

    url: Text = Field(description="the ASR server's base URL (`/v1/audio/transcriptions`)")
    model: Text = Field(description="the model it transcribes with, as it lists it")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return checked_url(value)


def checked_url(value: str) -> str:
    """`value` without a trailing `/`, when it is an http:// or https:// URL."""
    stripped = value.rstrip("/")
    try:
        parts = urlsplit(stripped)
        _ = parts.port  # raises ValueError for a port that is not a number in range
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        valid = False
    if not valid or any(char.isspace() for char in value):
        message = f"expected an http:// or https:// URL, got {render_value(value)}"
        raise field_error("url", message)
    return stripped


class Endpoint(Frozen):
    name: str = Field(description="the endpoint's key under `endpoints`")
    kind: EndpointKind = Field(
        description="`openai`, `ollama`, `health`, `embedding`, `rerank`, `asr` (speech to text) "
        "or `tts` (text to speech)"
    )
    url: Text = Field(
        description="base URL, `http://` or `https://` (for `health`: the URL to GET)"
    )
    model: Text | None = Field(
        default=None,
        description="model name the probes ask for, as the server lists it",
    )
    headers: dict[HeaderName, HeaderValue] = Field(
        default_factory=dict,
        description="HTTP headers (name: value) sent with every request to this endpoint's "
        "server: its probes, its `/metrics` reads, the doctor's (not to a `heard_by` server)",
    )
    on_demand: Literal["ollama", "llama-swap", "no"] | None = Field(
        default=None,
        description="the server loads models on demand: `ollama` (what is loaded: `/api/ps`; "
        "the default of kind `ollama`), `llama-swap` (`/running`: llama-swap or a router like "
        "it) or `no`; a real check then never loads a model that is not loaded (the endpoint "
        "is `idle`) nor lengthens an Ollama model's keep-alive",
    )
    keep_warm: Flag = Field(
        default=False,
        description="on demand: the real check loads the model when it is not loaded (and so "
        "keeps it resident)",
    )
    via: Text | None = Field(
        default=None,
        description="the router this endpoint is reached through (another endpoint's name, e.g. "
        "the LiteLLM proxy): while the router fails, this one is blocked by it (no incident, no "
        "repair here)",
    )
    backend: Text | None = Field(
        default=None,
        description="the endpoint serving this one behind its router (another endpoint's name, "
        "probed directly): while it fails, this one is blocked by it: one incident, the "
        "backend's",
    )
    api_key_file: FilePath | None = Field(
        default=None,
        description="a file holding the key the server asks for (vLLM `--api-key`, LiteLLM's "
        "master key, llama-swap's `apiKeys`), sent as `Authorization: Bearer`; read when the "
        "daemon starts or reloads; not readable by others (`chmod o-rwx`)",
    )
    api_key_env: EnvName | None = Field(
        default=None,
        description="the daemon's environment variable holding that key, instead of a file",
    )
    voice: Text = Field(
        default="alloy", description="tts: the voice the probe asks for (`/v1/audio/speech`)"
    )
    heard_by: AsrListener | None = Field(
        default=None,
        description="tts: an ASR server (`{url, model}`, e.g. the fleet's `asr` endpoint) that "
        "must hear the words of the phrase this one speaks: a round trip proving both",
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

    _key: SecretStr | None = PrivateAttr(default=None)
    _may_load: bool = PrivateAttr(default=True)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return checked_url(value)

    @property
    def loader(self) -> str:
        """How to ask the server what it has loaded (`ollama`, `llama-swap`), '' when its models
        are always loaded."""
        on_demand = self.on_demand or ("ollama" if self.kind == "ollama" else "no")
        return "" if on_demand == "no" else on_demand

    @property
    def may_load(self) -> bool:
        """A real check of this endpoint may load its model (see `without_loading`)."""
        return self._may_load or self.keep_warm or not self.loader

    def without_loading(self) -> Endpoint:
        """A copy whose real check never loads a model that is not loaded (the worker's checks
        in calm states; a repair's proof and a person's `probe` may load it)."""
        gentle = self.model_copy()
        gentle.forbid_loading()
        return gentle

    def forbid_loading(self) -> None:
        """`without_loading`'s mark (a private attribute: the fields stay frozen)."""
        self._may_load = False

    @property
    def keyed(self) -> bool:
        """The server asks for a key (`api_key_file` or `api_key_env`)."""
        return self.api_key_file is not None or self.api_key_env is not None

    @property
    def key_source(self) -> str:
        """Where the key comes from, for a person: `/etc/fleet/spark.key`, `$LITELLM_KEY`."""
        if self.api_key_file is not None:
            return str(self.api_key_file)
        return f"${self.api_key_env}" if self.api_key_env is not None else ""

    def with_key(self, key: str) -> Endpoint:
        """A copy of this endpoint holding the key read from its source (never in a dump or a
        repr; copies keep it)."""
        keyed = self.model_copy()
        keyed.hold_key(key)
        return keyed

    def hold_key(self, key: str) -> None:
        """Hold `key` (a private attribute: the fields stay frozen); `with_key` is the way."""
        self._key = SecretStr(key)

    def secret(self) -> str:
        """The key read (`with_key`), '' before: to send it, or to scrub it from a text."""
        return self._key.get_secret_value() if self._key is not None else ""

    def request_headers(self) -> dict[str, str]:
        """`headers`, and the key as the server expects it: what every request to it carries."""
        if not (key := self.secret()):
            return dict(self.headers)
        return {**self.headers, "Authorization": f"Bearer {key}"}

    def depends_on(self) -> tuple[str, ...]:
        """The endpoints whose failure this one's failure may be: its router, then its
        backend."""
        return tuple(name for name in (self.via, self.backend) if name is not None)

    def hosts(self) -> tuple[str, ...]:
        """The hosts that serve this endpoint: unit hosts in order, then `host`, no repeats."""
        names = [unit.host for unit in self.units]
        if self.host is not None:
            names.append(self.host)
        return tuple(dict.fromkeys(names))
