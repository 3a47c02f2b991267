"""The doctor's checks: small async functions in a registry, by the subject they look at.

A host check runs once per host that logged in (`ssh` itself runs before the others); an
endpoint check once per endpoint; a fleet check once. Each returns its findings (a check may
say nothing: a unit check of an endpoint without units). Built once from an explicit tuple of
modules, like the actions' registry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from types import ModuleType
from typing import Any

from supervisor.trust.doctor.model import Finding


class Over(StrEnum):
    HOST = "host"
    ENDPOINT = "endpoint"
    FLEET = "fleet"


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    over: Over
    run: Callable[..., Awaitable[list[Finding]]]
    doc: str


def check(name: str, *, over: Over, doc: str) -> Callable[[Callable[..., Any]], Check]:
    def wrap(fn: Callable[..., Awaitable[list[Finding]]]) -> Check:
        return Check(name=name, over=over, run=fn, doc=doc)

    return wrap


def build(modules: tuple[ModuleType, ...]) -> tuple[Check, ...]:
    found: dict[str, Check] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Check):
                if value.name in found and found[value.name] is not value:
                    raise ValueError(f"doctor check {value.name!r} is defined twice")
                found[value.name] = value
    return tuple(found.values())
