"""Pydantic's validation errors, said in plain words: one table, one place.

Each entry turns one pydantic error type into the sentence fragment a user reads after the field
path (`expected an integer, got 'many'`). Errors raised by our own validators
(`PydanticCustomError`) already carry their sentence and pass through unchanged.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from datetime import date, timedelta
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from supervisor.core.durations import format_duration

_MAX_SHOWN = 60


def render_value(value: object) -> str:
    """A value as the user wrote it in YAML, short: `'many'`, `true`, `null`, `a list`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | frozenset):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))  # 2, as written, not 2.0
    text = repr(value) if isinstance(value, str | bytes) else str(value)
    if isinstance(value, date):
        text = value.isoformat()
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 3] + "..."
    return " ".join(text.split()) if "\n" in text else text


def _got(err: ErrorDetails) -> str:
    return f"got {render_value(err['input'])}"


def _ctx(err: ErrorDetails, name: str) -> str:
    return render_value(err.get("ctx", {}).get(name))


Describe = Callable[[ErrorDetails], str]


def _expected(what: str, *kinds: str) -> dict[str, Describe]:
    """The same message for several error types: `expected an integer, got 'many'`."""
    return dict.fromkeys(kinds, lambda e: f"expected {what}, {_got(e)}")


_MESSAGES: Mapping[str, Describe] = {
    "missing": lambda e: "required",
    **_expected("an integer", "int_type", "int_parsing", "int_from_float"),
    **_expected("a number", "float_type", "float_parsing"),
    **_expected("a finite number", "finite_number"),
    **_expected("true or false", "bool_type", "bool_parsing"),
    **_expected("text", "string_type"),
    "string_too_short": lambda e: "must not be empty",
    **_expected("a mapping", "model_type", "model_attributes_type", "dict_type"),
    **_expected("a list", "list_type", "tuple_type"),
    "greater_than": lambda e: f"must be more than {_ctx(e, 'gt')}, {_got(e)}",
    "greater_than_equal": lambda e: f"must be at least {_ctx(e, 'ge')}, {_got(e)}",
    "less_than": lambda e: f"must be less than {_ctx(e, 'lt')}, {_got(e)}",
    "less_than_equal": lambda e: f"must be at most {_ctx(e, 'le')}, {_got(e)}",
    "recursion_loop": lambda e: "refers to itself (a YAML anchor loop)",
}


def describe(err: ErrorDetails, model: type[BaseModel]) -> str:
    """The plain-words message for one pydantic error raised while validating `model`."""
    kind = err["type"]
    if kind == "extra_forbidden":
        return unknown_key_message(model_at(model, tuple(err["loc"][:-1])))
    if kind == "literal_error":
        return f"expected one of {_choices(model, tuple(err['loc']), err)}, {_got(err)}"
    template = _MESSAGES.get(kind)
    if template is not None:
        return template(err)
    if kind in CUSTOM_ERRORS:
        return err["msg"]  # our own validators already speak plainly
    message = err["msg"]  # a pydantic type this table lacks: still one readable line
    return f"{message[:1].lower()}{message[1:]}, {_got(err)}"


CUSTOM_ERRORS = frozenset({"duration", "range", "url", "path", "header", "env"})
"""Error types raised by the config validators (`supervisor.config.fields.fail`) with a finished
sentence."""


def unknown_key_message(model: type[BaseModel] | None) -> str:
    """`unknown key (expected one of: a, b, c)`, leaving out fields the loader fills itself."""
    if model is None:
        return "unknown key"
    names = sorted(set(model.model_fields) - _FILLED_FROM_KEYS)
    return f"unknown key (expected one of: {', '.join(names)})"


_FILLED_FROM_KEYS = frozenset(
    {"name", "source", "key_lines"}
)  # set from the mapping key / the file itself


def _choices(model: type[BaseModel], loc: tuple[int | str, ...], err: ErrorDetails) -> str:
    owner = model_at(model, loc[:-1])
    if owner is not None and isinstance(loc[-1], str) and loc[-1] in owner.model_fields:
        literal = _find_literal(owner.model_fields[loc[-1]].annotation)
        if literal:
            return ", ".join(str(choice) for choice in literal)
    return str(err.get("ctx", {}).get("expected", "")).replace("'", "")


def _find_literal(annotation: Any) -> tuple[object, ...]:
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    for arg in get_args(annotation):
        found = _find_literal(arg)
        if found:
            return found
    return ()


def model_at(model: type[BaseModel], loc: tuple[object, ...]) -> type[BaseModel] | None:
    """The model class that validates the value at `loc` inside `model` (None if not a model)."""
    annotation: Any = model
    for part in loc:
        current = _unwrap(annotation)
        if isinstance(current, type) and issubclass(current, BaseModel):
            if not isinstance(part, str) or part not in current.model_fields:
                return None
            annotation = current.model_fields[part].annotation
        elif get_origin(current) in (dict, tuple, list, Mapping, typing.Mapping):
            args = [arg for arg in get_args(current) if arg is not Ellipsis]
            annotation = args[-1] if args else None
        else:
            return None
    found = _unwrap(annotation)
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> X; `Annotated[X, ...]` is already unwrapped by pydantic's field info."""
    if isinstance(annotation, types.UnionType) or get_origin(annotation) is typing.Union:
        rest = [arg for arg in get_args(annotation) if arg is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation
