"""Which endpoints a control action names: one endpoint, a glob over endpoint names, every
endpoint a host serves (`host:NAME`) or all of them (`all`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from fnmatch import fnmatchcase

from supervisor.control.model import Code

ALL = ("all", "*")
HOST = "host:"
_GLOB = frozenset("*?[")


class MatchError(Exception):
    """The target names nothing known; `code` says how to answer it."""

    def __init__(self, code: Code, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


def select(
    target: str, endpoint_hosts: Mapping[str, Sequence[str]], hosts: Collection[str]
) -> tuple[str, ...]:
    """The endpoints (in config order) `target` names, given each endpoint's hosts."""
    names = list(endpoint_hosts)
    known = ", ".join(names) or "none"
    if not target.strip():
        raise MatchError(Code.BAD_REQUEST, "name an endpoint, a glob, host:NAME or all")
    if target in ALL:
        return tuple(names)
    if target.startswith(HOST):
        host = target[len(HOST) :]
        if host not in hosts:
            raise MatchError(
                Code.NOT_FOUND, f"no host {host!r} (hosts: {', '.join(hosts) or 'none'})"
            )
        return tuple(n for n in names if host in endpoint_hosts[n])
    if _GLOB & set(target):
        found = tuple(n for n in names if fnmatchcase(n, target))
        if not found:
            raise MatchError(Code.NOT_FOUND, f"no endpoint matches {target!r} (endpoints: {known})")
        return found
    if target not in endpoint_hosts:
        raise MatchError(Code.NOT_FOUND, f"no endpoint {target!r} (endpoints: {known})")
    return (target,)


def covers(target: str, endpoint: str, endpoint_hosts: Mapping[str, Sequence[str]]) -> bool:
    """Whether `target` names `endpoint` (a stored silence whose host or endpoints changed
    since matches what it names now)."""
    if target in ALL:
        return True
    if target.startswith(HOST):
        return target[len(HOST) :] in endpoint_hosts.get(endpoint, ())
    if _GLOB & set(target):
        return fnmatchcase(endpoint, target)
    return target == endpoint
