"""The strict field types every config model is made of, and their validators.

Numbers and booleans are strict (YAML already types them; `"3"` or `1` for a flag is a mistake,
not a value); durations are written `90s`, `15m`, `2h`; a bad value fails with a finished sentence
(`fail`), which the loader puts after the key's file, line and path.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from supervisor.config.messages import render_value
from supervisor.core.durations import DurationError, format_duration, parse_duration


def field_error(kind: str, message: str) -> PydanticCustomError:
    """A validation error whose text is `message` as is."""
    return PydanticCustomError(kind, "{message}", {"message": message})


def _to_duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except DurationError as exc:
            raise field_error("duration", str(exc)) from None
    got = render_value(value)
    raise field_error("duration", f"expected a duration like 90s, 15m or 2h, got {got}")


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        got = format_duration(value) if value else "0s"
        raise field_error("duration", f"must be longer than 0s, got {got}")
    return value


def expand_home(path: Path) -> Path:
    """`~/x` -> `/home/me/x`; unchanged when there is no home directory to expand to."""
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def _to_path(value: object) -> Path:
    if isinstance(value, Path):
        return value
    if isinstance(value, str) and value.strip():
        return expand_home(Path(value))
    raise field_error("path", f"expected a file path, got {render_value(value)}")


def _between(low: int, high: int) -> AfterValidator:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise field_error("range", f"must be between {low} and {high}, got {value}")
        return value

    return AfterValidator(check)


def _ratio(value: float) -> float:
    if not 0 < value <= 1:
        raise field_error("range", f"must be more than 0 and at most 1, got {render_value(value)}")
    return value


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_SET_PER_REQUEST = frozenset({"content-length", "transfer-encoding"})


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_name(name: str) -> str:
    if not _ENV_NAME.fullmatch(name):
        got = render_value(name)
        raise field_error("env", f"expected a variable's name like FLEET_KEY, got {got}")
    return name


def _header_name(name: str) -> str:
    if not _TOKEN.fullmatch(name):
        allowed = "letters, digits and !#$%&'*+-.^_`|~"
        raise field_error("header", f"not a header name ({allowed}), got {render_value(name)}")
    if name.lower() in _SET_PER_REQUEST:
        raise field_error("header", "set by the client for each request (leave it out)")
    return name


def _header_value(value: str) -> str:
    if any(char in value for char in "\r\n\0"):
        message = f"must be one line (no CR, LF or NUL), got {render_value(value)}"
        raise field_error("header", message)
    return value


Duration = Annotated[timedelta, BeforeValidator(_to_duration)]
PositiveDuration = Annotated[timedelta, BeforeValidator(_to_duration), AfterValidator(_positive)]
FilePath = Annotated[Path, BeforeValidator(_to_path)]
Text = Annotated[str, Field(strict=True, min_length=1)]
Flag = Annotated[bool, Field(strict=True)]
Count = Annotated[int, Field(strict=True, ge=1)]
Port = Annotated[int, Field(strict=True), _between(1, 65535)]
Ratio = Annotated[float, Field(strict=True, allow_inf_nan=False), AfterValidator(_ratio)]
Rate = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]
HeaderName = Annotated[str, Field(strict=True), AfterValidator(_header_name)]
EnvName = Annotated[str, Field(strict=True), AfterValidator(_env_name)]
HeaderValue = Annotated[str, Field(strict=True), AfterValidator(_header_value)]


class Frozen(BaseModel):
    """A config model: frozen, and an unknown key is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")
