"""The fleet config as typed, frozen models: what the rest of the daemon reads.

`FleetConfig` is the whole file; its parts live in `supervisor.config.sections` (store, playbook,
remediation, defaults and probe settings, notify, http), `supervisor.config.supervised` (hosts,
units, endpoints) and `supervisor.config.fields` (the strict field types), and are all imported
from here. Field descriptions feed `docs/config-table.md` (see `supervisor.config.doctable`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import Field

from supervisor.config.fields import (
    Frozen,
)
from supervisor.config.sections import (
    Defaults,
    HttpConfig,
    NotifyConfig,
    PlaybookConfig,
    RemediationConfig,
    StoreConfig,
)
from supervisor.config.supervised import (
    Endpoint,
    Host,
)

__all__ = ["FleetConfig", "UnknownEndpointError"]


class UnknownEndpointError(KeyError):
    """`FleetConfig.endpoint` was asked for a name the config does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


class FleetConfig(Frozen):
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
    key_lines: Mapping[str, int] = Field(
        default_factory=dict,
        description="the line of each keyed endpoint's `api_key_file` or `api_key_env`",
    )

    def endpoint(self, name: str) -> Endpoint:
        """The endpoint called `name`; `KeyError` naming the known endpoints otherwise."""
        try:
            return self.endpoints[name]
        except KeyError:
            known = ", ".join(sorted(self.endpoints)) or "none"
            raise UnknownEndpointError(f"unknown endpoint {name!r} (endpoints: {known})") from None
