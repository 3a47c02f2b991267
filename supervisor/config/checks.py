"""Cross-checks that need more than one field or more than one entry.

They run on every entry, even one with type errors: the loader passes a best-effort entry and
drops the findings that read a field which already failed its own check (`Finding.uses`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from supervisor.config.errors import Loc
from supervisor.config.launchd import check_unit_managers
from supervisor.config.supervised import COMPLETION_KINDS, MODEL_KINDS, Endpoint, Host, UnitRef


@dataclass(frozen=True)
class ConfigFinding:
    """A problem at a document path, in plain words, and the entry fields the check read."""

    loc: Loc
    message: str
    uses: tuple[str, ...] = ()


def check_hosts(hosts: Mapping[str, Host]) -> Iterator[ConfigFinding]:
    """A host reached over SSH needs an address."""
    for name, host in hosts.items():
        if not host.local and host.address is None:
            loc = ("hosts", name, "address")
            yield ConfigFinding(loc, "required unless local: true", uses=("local", "address"))


def check_endpoint(
    endpoint: Endpoint, units: Sequence[UnitRef | None], host_names: Collection[str] | None
) -> Iterator[ConfigFinding]:
    """The model where the kind needs one, kind-only fields, host references, repeated units.

    `units` are the endpoint's units checked one by one (None for a unit with type errors);
    `host_names` is None when the `hosts` section itself is broken (references are not checked).
    """
    at = ("endpoints", endpoint.name)
    if endpoint.model is None and endpoint.kind in MODEL_KINDS:
        message = f"required for kind {endpoint.kind!r}"
        yield ConfigFinding((*at, "model"), message, uses=("kind", "model"))
    if endpoint.kind not in COMPLETION_KINDS:
        only = f"only used by kinds openai and ollama, not {endpoint.kind!r}"
        if endpoint.expect_reasoning:
            yield ConfigFinding((*at, "expect_reasoning"), only, uses=("kind", "expect_reasoning"))
        if endpoint.baseline_tok_s is not None:
            yield ConfigFinding((*at, "baseline_tok_s"), only, uses=("kind", "baseline_tok_s"))
    if endpoint.heard_by is not None and endpoint.kind != "tts":
        message = f"only used by kind 'tts', not {endpoint.kind!r}"
        yield ConfigFinding((*at, "heard_by"), message, uses=("kind", "heard_by"))
    if host_names is not None:
        yield from _host_references(endpoint, units, host_names)
    first_index: dict[tuple[str, str], int] = {}
    for index, unit in enumerate(units):
        if unit is None:
            continue
        key = (unit.host, unit.unit)
        if key in first_index:
            message = f"the same unit as units[{first_index[key]}]"
            yield ConfigFinding((*at, "units", index), message)
        else:
            first_index[key] = index


def _host_references(
    endpoint: Endpoint, units: Sequence[UnitRef | None], host_names: Collection[str]
) -> Iterator[ConfigFinding]:
    at = ("endpoints", endpoint.name)
    for index, unit in enumerate(units):
        if unit is not None and unit.host not in host_names:
            yield ConfigFinding((*at, "units", index, "host"), unknown_host(unit.host, host_names))
    if endpoint.host is not None and endpoint.host not in host_names:
        yield ConfigFinding((*at, "host"), unknown_host(endpoint.host, host_names), uses=("host",))


def unknown_host(name: str, host_names: Collection[str]) -> str:
    """`unknown host 'spark3' (hosts: forge, spark1, spark2)`."""
    if not host_names:
        return f"unknown host {name!r} (no hosts are configured)"
    return f"unknown host {name!r} (hosts: {', '.join(sorted(host_names))})"


def check_dependencies(
    endpoint: Endpoint, endpoints: Mapping[str, Endpoint]
) -> Iterator[ConfigFinding]:
    """`via` and `backend` name other endpoints, which themselves depend on nothing (one hop:
    a router in front of servers)."""
    for field in ("via", "backend"):
        name = getattr(endpoint, field)
        if name is None:
            continue
        loc = ("endpoints", endpoint.name, field)
        if name == endpoint.name:
            yield ConfigFinding(loc, "names this endpoint itself", uses=(field,))
        elif name not in endpoints:
            known = ", ".join(sorted(n for n in endpoints if n != endpoint.name)) or "none"
            yield ConfigFinding(
                loc, f"unknown endpoint {name!r} (endpoints: {known})", uses=(field,)
            )
        elif endpoints[name].depends_on():
            message = (
                f"{name!r} is itself behind {endpoints[name].depends_on()[0]!r} (one hop only)"
            )
            yield ConfigFinding(loc, message, uses=(field,))


def check_fleet(
    hosts: Mapping[str, Host],
    endpoints: Mapping[str, tuple[Endpoint, Sequence[UnitRef | None]]],
    host_names: Collection[str] | None,
) -> list[ConfigFinding]:
    """Every cross-check over the whole file, in file order."""
    findings = list(check_hosts(hosts))
    by_name = {endpoint.name: endpoint for endpoint, _ in endpoints.values()}
    for endpoint, units in endpoints.values():
        findings.extend(check_endpoint(endpoint, units, host_names))
        findings.extend(check_dependencies(endpoint, by_name))
        at = ("endpoints", endpoint.name)
        findings.extend(
            ConfigFinding(loc, text) for loc, text in check_unit_managers(at, units, hosts)
        )
    return findings
