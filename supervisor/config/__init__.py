"""The fleet config: one YAML file describing hosts, endpoints and probe settings.

`load_config(path)` returns a frozen `FleetConfig` or raises `ConfigError`, whose `issues` list
every problem found as `file:line: path: message`.
"""

from supervisor.config.errors import ConfigError, ConfigIssue
from supervisor.config.loader import load_config, parse_config, resolve_config_path
from supervisor.config.models import FleetConfig, UnknownEndpointError
from supervisor.config.sections import (
    Defaults,
    HttpConfig,
    NotifyConfig,
    PlaybookConfig,
    ProbeSettings,
    RemediationConfig,
    StoreConfig,
    TelegramConfig,
)
from supervisor.config.supervised import Endpoint, EndpointKind, Host, UnitRef

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "Defaults",
    "Endpoint",
    "EndpointKind",
    "FleetConfig",
    "Host",
    "HttpConfig",
    "NotifyConfig",
    "PlaybookConfig",
    "ProbeSettings",
    "RemediationConfig",
    "StoreConfig",
    "TelegramConfig",
    "UnitRef",
    "UnknownEndpointError",
    "load_config",
    "parse_config",
    "resolve_config_path",
]
