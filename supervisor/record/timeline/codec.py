"""Records to JSON payloads and back, in one place: datetimes as ISO 8601, tuples as lists,
enums as their values, nested dataclasses as objects; a field that is None where its default is
None is left out. Decoding never raises: an unknown tag, a newer version or a payload that does
not fit its class gives an `Unknown` record that keeps what was stored."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from functools import cache
from typing import Any, Union

from supervisor.record.timeline.base import REGISTRY, EntryKind, JSONValue, Record, kind_of


class PayloadError(ValueError):
    """A stored payload does not fit its record class (the message says where)."""


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


def encode(record: object) -> dict[str, JSONValue]:
    """A record's payload (its tag and version are stored beside it), or any nested value's
    (a `ProbeSample`, say) JSON object."""
    if isinstance(record, Unknown):
        return dict(record.payload)
    out = _encode(record)
    assert isinstance(out, dict)
    return out


def _encode(value: object) -> JSONValue:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, JSONValue] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None and f.default is None:
                continue
            out[f.name] = _encode(item)
        return out
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return _encode(value.value)
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    return value  # type: ignore[return-value]  # JSON or not: the store's JSON column decides


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
            record = _build(
                cls, cls.upgrade(version, payload) if version < cls.VERSION else payload
            )
        except (PayloadError, TypeError, ValueError) as err:
            problem = f"{tag}: {err}"
        else:
            assert isinstance(record, Record)
            return record
    stored: object = payload  # a row written by hand may hold any JSON
    return Unknown(
        stored_tag=tag,
        stored_version=version,
        stored_kind=kind,
        text=text,
        payload=dict(payload) if isinstance(stored, Mapping) else {"payload": stored},  # type: ignore[dict-item]
        problem=problem,
    )


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(cls: type, payload: object) -> object:
    if not isinstance(payload, Mapping):
        raise PayloadError(f"{cls.__name__} needs an object, got {type(payload).__name__}")
    hints = _hints(cls)
    values: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        if f.name not in payload:
            continue  # its default applies (a required field missing raises TypeError)
        try:
            values[f.name] = decode_value(hints[f.name], payload[f.name])
        except PayloadError as err:
            raise PayloadError(f"{f.name}: {err}") from None
    return cls(**values)


def decode_value(tp: Any, value: object) -> object:
    """`value` (JSON) as the type `tp` says: the one conversion every field goes through."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is not type(None):
                try:
                    return decode_value(arg, value)
                except PayloadError:
                    continue
        raise PayloadError(f"{value!r} fits none of {tp}")
    if origin is tuple:
        if not isinstance(value, list):
            raise PayloadError(f"expected a list, got {value!r}")
        (item, _) = typing.get_args(tp)
        return tuple(decode_value(item, v) for v in value)
    if origin is not None and issubclass(origin, Mapping):
        if not isinstance(value, dict):
            raise PayloadError(f"expected an object, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value)
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(value)
        except ValueError:
            raise PayloadError(f"{value!r} is not a valid {tp.__name__}") from None
    if tp is datetime:
        if not isinstance(value, str):
            raise PayloadError(f"expected a time, got {value!r}")
        return datetime.fromisoformat(value)
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp in (str, int, bool) and type(value) is tp:
        return value
    raise PayloadError(f"expected {getattr(tp, '__name__', tp)}, got {value!r}")
