"""Cross-checks of units against their host's service manager (systemd or launchd).

A unit on a `service_manager: launchd` host names a launchd job: its label (`com.fleet.mlx-kimi`),
its `domain` (`gui/501` for a LaunchAgent of user 501, `system` for a LaunchDaemon) and its
`plist` (what `launchctl bootstrap` loads again after a `bootout`). A unit on a systemd host names
a systemd unit and has neither. Mixing them up is a config error at the field that is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence

from supervisor.config.errors import Loc
from supervisor.config.supervised import Host, UnitRef

#: `system`, `gui/<uid>` or `user/<uid>` (the domains a service of a fleet host lives in)
DOMAIN = re.compile(r"system|(?:gui|user)/\d+")
#: the suffixes of systemd unit types (`systemctl` reads a bare name as `.service`)
SYSTEMD_SUFFIXES = (
    ".service",
    ".socket",
    ".target",
    ".timer",
    ".mount",
    ".automount",
    ".swap",
    ".path",
    ".slice",
    ".scope",
    ".device",
)
#: a reverse-DNS launchd label: `com.fleet.mlx-kimi`, `org.example.job` (two dots at least)
LAUNCHD_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9_-]+){2,}")

DOMAIN_HELP = "gui/<uid> for a LaunchAgent, system for a LaunchDaemon, or user/<uid>"


def is_systemd_name(name: str) -> bool:
    """`vllm.service`, `ollama.socket`, `getty@tty1.service`: a systemd unit's name."""
    return name.endswith(SYSTEMD_SUFFIXES) or "@" in name


def is_launchd_label(name: str) -> bool:
    """`com.fleet.mlx-kimi`: reverse-DNS, no systemd suffix."""
    return bool(LAUNCHD_LABEL.fullmatch(name)) and not is_systemd_name(name)


def check_unit_managers(
    at: Loc, units: Sequence[UnitRef | None], hosts: Mapping[str, Host]
) -> Iterator[tuple[Loc, str]]:
    """(where, message) for every unit that does not fit its host's service manager. `at` is
    the endpoint's location; units of unknown hosts are left to the host-reference check."""
    for index, unit in enumerate(units):
        host = hosts.get(unit.host) if unit is not None else None
        if unit is None or host is None:
            continue
        where = (*at, "units", index)
        if host.service_manager == "launchd":
            yield from _launchd_unit(where, unit, host.name)
        else:
            yield from _systemd_unit(where, unit, host.name)


def _launchd_unit(where: Loc, unit: UnitRef, host: str) -> Iterator[tuple[Loc, str]]:
    if is_systemd_name(unit.unit):
        yield (
            (*where, "unit"),
            f"{unit.unit!r} is a systemd unit name, but host {host!r} uses launchd: "
            "name the job's launchd label (e.g. com.fleet.mlx-kimi)",
        )
    if unit.domain is None:
        yield (*where, "domain"), f"required for a unit on launchd host {host!r} ({DOMAIN_HELP})"
    elif not DOMAIN.fullmatch(unit.domain):
        yield (*where, "domain"), f"expected {DOMAIN_HELP}, got {unit.domain!r}"
    if unit.plist is None:
        yield (
            (*where, "plist"),
            f"required for a unit on launchd host {host!r} (the job's plist, for bootstrap)",
        )
    elif not unit.plist.startswith(("/", "~/")) or unit.plist.endswith("/"):
        yield (
            (*where, "plist"),
            f"expected an absolute path or one starting with ~/, got {unit.plist!r}",
        )
    if unit.container is not None:
        yield (*where, "container"), f"only for units on systemd hosts, not launchd host {host!r}"


def _systemd_unit(where: Loc, unit: UnitRef, host: str) -> Iterator[tuple[Loc, str]]:
    if is_launchd_label(unit.unit):
        yield (
            (*where, "unit"),
            f"{unit.unit!r} looks like a launchd label, but host {host!r} uses systemd: "
            "name the systemd unit (e.g. vllm-ds4-head.service), or set "
            "service_manager: launchd on the host",
        )
    for name in ("domain", "plist"):
        if getattr(unit, name) is not None:
            yield (*where, name), f"only for units on launchd hosts, not systemd host {host!r}"
