"""Records to JSON payloads and back, in one place, by pydantic (a `TypeAdapter` per frozen
dataclass): nested dataclasses as objects, datetimes as ISO 8601 (`supervisor.core.payload.
Time`), a `Maybe` field that is None left out; tuples and enums are written as JSON arrays and
their values. A payload is read by strict JSON validation: a string is no number, a number no
bool, an object's unknown keys are ignored. Decoding never raises: an unknown tag, a newer
version or a payload that does not fit its class gives an `Unknown` record that keeps what was
stored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_json

from supervisor.record.timeline.base import REGISTRY, EntryKind, JSONValue, Record, kind_of

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Unknown(Record):
    """A stored entry this code cannot type: a tag it does not know, a version newer than it
    reads, or a payload that does not fit. Readers show its stored summary and go on."""

    TAG = "unknown"
    stored_tag: str
    stored_version: int
    stored_kind: str
    text: str  #: the summary stored with it
    payload: Mapping[str, JSONValue] = field(default_factory=dict)
    problem: str = ""  #: why it could not be typed

    @property
    def tag(self) -> str:
        return self.stored_tag

    @property
    def version(self) -> int:
        return self.stored_version

    @property
    def kind(self) -> EntryKind:
        return kind_of(self.stored_kind)

    @property
    def summary(self) -> str:
        return self.text


_ADAPTERS: dict[object, TypeAdapter[Any]] = {}
"""One pydantic adapter per type, built when first needed (building one reads its fields)."""


def adapter(tp: type[T]) -> TypeAdapter[T]:
    if tp not in _ADAPTERS:
        _ADAPTERS[tp] = TypeAdapter(tp)
    return _ADAPTERS[tp]


def encode(record: object) -> dict[str, JSONValue]:
    """A record's payload (its tag and version are stored beside it), or any nested value's
    (a `ProbeSample`, say) object. A value that does not fit its field's type is kept as given:
    the store's JSON column takes JSON values only and says which one is not."""
    if isinstance(record, Unknown):
        return dict(record.payload)
    out = adapter(type(record)).dump_python(record, warnings=False)
    assert isinstance(out, dict)
    return out


def decode_value(tp: type[T], value: object) -> T:
    """`value` (JSON) as the type `tp` says; `pydantic.ValidationError` when it does not fit."""
    return adapter(tp).validate_json(to_json(value), strict=True)


def decode(
    tag: str, version: int, payload: Mapping[str, JSONValue], *, kind: str = "", text: str = ""
) -> Record:
    """The typed record of a stored entry, or `Unknown` (never an exception)."""
    cls = REGISTRY.get(tag)
    problem = ""
    if cls is None:
        problem = f"unknown type {tag!r}"
    elif version > cls.VERSION:
        problem = f"{tag} version {version} is newer than this code reads ({cls.VERSION})"
    else:
        try:
            return decode_value(
                cls, cls.upgrade(version, payload) if version < cls.VERSION else payload
            )
        except ValidationError as err:
            problem = f"{tag}: {_said(err)}"
        except (TypeError, ValueError) as err:  # an upgrade that met a payload it cannot read
            problem = f"{tag}: {err}"
    stored: object = payload  # a row written by hand may hold any JSON
    return Unknown(
        stored_tag=tag,
        stored_version=version,
        stored_kind=kind,
        text=text,
        payload=dict(payload) if isinstance(stored, Mapping) else {"payload": stored},  # type: ignore[dict-item]
        problem=problem,
    )


def _said(err: ValidationError) -> str:
    """`sample.at: Input should be a valid datetime, input is too short`, one per problem."""
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
        for e in err.errors(include_url=False)
    )
