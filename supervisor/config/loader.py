"""Read the fleet YAML file into a `FleetConfig`, or raise `ConfigError` listing every issue.

Each part (store, defaults, every host, every endpoint) is validated on its own so that one bad
entry does not hide the problems of the others; the cross-checks then run on every entry, leaving
out only the fields that already failed their type checks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from supervisor.config.checks import check_fleet
from supervisor.config.collect import IssueCollector, quietly
from supervisor.config.errors import ConfigError, ConfigIssue
from supervisor.config.fields import expand_home
from supervisor.config.keys import key_field, key_problems, peer_problems
from supervisor.config.messages import render_value, unknown_key_message
from supervisor.config.models import FleetConfig
from supervisor.config.sections import (
    Defaults,
    HttpConfig,
    NotifyConfig,
    PlaybookConfig,
    RemediationConfig,
    StoreConfig,
)
from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.config.yamlsource import parse_yaml

ENV_VAR = "FLEET_SUPERVISOR_CONFIG"
DEFAULT_PATH = Path("fleet.yaml")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
SECTIONS = (
    "store",
    "defaults",
    "playbook",
    "remediation",
    "notify",
    "http",
    "hosts",
    "endpoints",
)
MAX_BYTES = 10_000_000
_TOP = "a mapping with store, defaults, hosts and endpoints"

Hosts = dict[str, Host]


def resolve_config_path(cli_value: str | None, env: Mapping[str, str]) -> Path:
    """`--config`, else `$FLEET_SUPERVISOR_CONFIG`, else `./fleet.yaml` (empty means unset)."""
    chosen = cli_value or env.get(ENV_VAR) or ""
    return expand_home(Path(chosen)) if chosen else DEFAULT_PATH


def load_config(path: Path | str) -> FleetConfig:
    """Load the fleet config file at `path`; raises `ConfigError`."""
    file = str(path)
    try:
        with Path(path).open("rb") as stream:
            raw = stream.read(MAX_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError([ConfigIssue(file, None, "", f"cannot read: {reason}")]) from None
    except ValueError as exc:  # a NUL byte in the path
        raise ConfigError([ConfigIssue(file, None, "", f"cannot read: {exc}")]) from None
    if len(raw) > MAX_BYTES:
        message = f"cannot read: larger than {MAX_BYTES // 1_000_000} MB, not a fleet config"
        raise ConfigError([ConfigIssue(file, None, "", message)])
    absolute = Path(path).absolute()
    return _build(_decode(raw, file), file=file, source=absolute, base_dir=absolute.parent)


def parse_config(text: str, *, source: str | Path, base_dir: Path) -> FleetConfig:
    """Parse config `text`; `source` names it in errors, relative paths resolve from `base_dir`."""
    return _build(text, file=str(source), source=Path(source), base_dir=base_dir.absolute())


def _decode(raw: bytes, file: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        message = f"cannot read: not UTF-8 text (byte 0x{raw[exc.start]:02x})"
        raise ConfigError([ConfigIssue(file, line, "", message)]) from None


def _build(text: str, *, file: str, source: Path, base_dir: Path) -> FleetConfig:
    document = parse_yaml(text, file)
    data = document.data
    if data is None:
        raise ConfigError([ConfigIssue(file, None, "", f"the file is empty (expected {_TOP})")])
    if not isinstance(data, dict):
        message = f"expected {_TOP} at the top level, got {render_value(data)}"
        raise ConfigError([ConfigIssue(file, document.lines.line_of(()), "", message)])
    issues = IssueCollector(file, document.lines, list(document.issues))
    for key in data:
        if key not in SECTIONS:
            issues.at_key((key,), unknown_key_message(FleetConfig))

    store, _ = issues.validate(StoreConfig, data.get("store", {}), ("store",))
    if store is not None:
        for field, problem in peer_problems(store, base_dir):
            issues.at(("store", field), problem)
    defaults, _ = issues.validate(Defaults, data.get("defaults", {}), ("defaults",))
    playbook, _ = issues.validate(PlaybookConfig, data.get("playbook", {}), ("playbook",))
    remediation, _ = issues.validate(
        RemediationConfig, data.get("remediation", {}), ("remediation",)
    )
    notify, _ = issues.validate(NotifyConfig, data.get("notify", {}), ("notify",))
    http, _ = issues.validate(HttpConfig, data.get("http", {}), ("http",))
    host_data = _section(issues, data, "hosts")
    hosts, hosts_to_check = _hosts(issues, host_data)
    if "endpoints" not in data:
        issues.at(("endpoints",), "required")
    elif data["endpoints"] == {}:
        issues.at(("endpoints",), "expected at least one endpoint")
    endpoint_data = _section(issues, data, "endpoints")
    endpoints, endpoints_to_check = _endpoints(issues, endpoint_data, defaults or Defaults())
    endpoints = {name: _resolve_key_file(e, base_dir) for name, e in endpoints.items()}
    for key_name, endpoint in endpoints.items():
        for field, problem in key_problems(endpoint):
            issues.at(("endpoints", key_name, field), problem)

    hosts_readable = isinstance(data.get("hosts", {}), dict)
    host_names = {key for key in host_data if isinstance(key, str)} if hosts_readable else None
    for finding in check_fleet(hosts_to_check, endpoints_to_check, host_names):
        section, name = finding.loc[:2]
        if not any((section, name, used) in issues.bad_fields for used in finding.uses):
            issues.at(finding.loc, finding.message)
    if (
        issues.found
        or store is None
        or defaults is None
        or playbook is None
        or remediation is None
        or notify is None
        or http is None
    ):
        raise ConfigError(issues.found)
    return FleetConfig(
        source=source,
        store=store.model_copy(
            update={
                "path": _absolute(store.path, base_dir),
                "password_file": store.password_file and _absolute(store.password_file, base_dir),
                "spill_dir": store.spill_dir and _absolute(store.spill_dir, base_dir),
                "peer_token_file": store.peer_token_file
                and _absolute(store.peer_token_file, base_dir),
            }
        ),
        defaults=defaults,
        playbook=playbook.model_copy(update={"path": _absolute(playbook.path, base_dir)}),
        remediation=remediation,
        notify=_resolve_notify_paths(notify, base_dir),
        http=_resolve_http_paths(http, base_dir),
        hosts={name: _resolve_host_paths(host, base_dir) for name, host in hosts.items()},
        endpoints=endpoints,
        key_lines={
            name: line
            for name, endpoint in endpoints.items()
            if endpoint.keyed
            and (line := document.lines.line_of(("endpoints", name, key_field(endpoint))))
        },
    )


def _resolve_key_file(endpoint: Endpoint, base_dir: Path) -> Endpoint:
    if endpoint.api_key_file is None:
        return endpoint
    return endpoint.model_copy(update={"api_key_file": _absolute(endpoint.api_key_file, base_dir)})


def _section(issues: IssueCollector, data: dict[object, object], key: str) -> dict[object, object]:
    value = data.get(key, {})
    if isinstance(value, dict):
        return value
    issues.at((key,), f"expected a mapping, got {render_value(value)}")
    return {}


def _entry(
    issues: IssueCollector, section: str, key: object, value: object, model: type[BaseModel]
) -> tuple[str, object] | None:
    """The entry's name and its mapping with `name` filled in; None when the key is no name."""
    if not isinstance(key, str):
        message = f"a name must be text, got {render_value(key)} (quote it)"
        issues.at_key((section, key), message, path=f"{section}.{render_value(key)}")
        return None
    if not NAME.fullmatch(key):
        issues.at_key((section, key), _BAD_NAME)
    if not isinstance(value, dict):
        return key, value  # the model reports what it got instead of a mapping
    if "name" in value:
        issues.at_key((section, key, "name"), unknown_key_message(model))
    return key, {**value, "name": key}


_BAD_NAME = "invalid name (use letters, digits, '.', '_' and '-', starting with a letter or digit)"
_ENDPOINT_FILL = {"kind": "health", "url": "http://placeholder.invalid"}
"""Stand-ins for an endpoint's required fields that failed, so the cross-checks still run."""

_Checkable = tuple[Endpoint, list[UnitRef | None]]


def _hosts(issues: IssueCollector, raw: dict[object, object]) -> tuple[Hosts, Hosts]:
    """(valid hosts, best efforts for the cross-checks), by name."""
    hosts: Hosts = {}
    checkable: Hosts = {}
    for key, value in raw.items():
        entry = _entry(issues, "hosts", key, value, Host)
        if entry is None:
            continue
        name, data = entry
        host, partial = issues.validate(Host, data, ("hosts", key))
        if host is not None:
            hosts[name] = host
        if partial is not None:
            checkable[name] = partial
    return hosts, checkable


def _endpoints(
    issues: IssueCollector, raw: dict[object, object], defaults: Defaults
) -> tuple[dict[str, Endpoint], dict[str, _Checkable]]:
    """(valid endpoints, best efforts with their units one by one), by name."""
    endpoints: dict[str, Endpoint] = {}
    checkable: dict[str, _Checkable] = {}
    for key, value in raw.items():
        entry = _entry(issues, "endpoints", key, value, Endpoint)
        if entry is None:
            continue
        name, data = entry
        units: list[UnitRef | None] = []
        if isinstance(data, dict):
            data.setdefault("startup_grace", defaults.startup_grace)
            probe = data.get("probe", {})
            if isinstance(probe, dict):  # the endpoint's keys override the defaults one by one
                data["probe"] = {**defaults.probe.model_dump(), **probe}
            raw_units = data.get("units", [])
            if isinstance(raw_units, list):
                units = [quietly(UnitRef, unit) for unit in raw_units]
        endpoint, partial = issues.validate(Endpoint, data, ("endpoints", key), _ENDPOINT_FILL)
        if endpoint is not None:
            endpoints[name] = endpoint
        if partial is not None:
            checkable[name] = (partial, units)
    return endpoints, checkable


def _absolute(path: Path, base_dir: Path) -> Path:
    """`path` relative to the config's folder, with `..` folded (no symlinks resolved)."""
    return path if path.is_absolute() else Path(os.path.normpath(base_dir / path))


def _resolve_notify_paths(notify: NotifyConfig, base_dir: Path) -> NotifyConfig:
    telegram = notify.telegram
    if telegram is None or telegram.token_file is None:
        return notify
    token_file = _absolute(telegram.token_file, base_dir)
    return notify.model_copy(
        update={"telegram": telegram.model_copy(update={"token_file": token_file})}
    )


def _resolve_http_paths(http: HttpConfig, base_dir: Path) -> HttpConfig:
    update = {
        name: _absolute(value, base_dir)
        for name, value in (
            ("token_file", http.token_file),
            ("control_token_file", http.control_token_file),
        )
        if value is not None
    }
    return http.model_copy(update=update) if update else http


def _resolve_host_paths(host: Host, base_dir: Path) -> Host:
    update = {
        name: _absolute(value, base_dir)
        for name, value in (("key", host.key), ("known_hosts", host.known_hosts))
        if value is not None
    }
    return host.model_copy(update=update) if update else host
