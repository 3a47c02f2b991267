"""What the generated reference tables share (`supervisor.config.doctable` for the config keys,
`supervisor.playbook.docs` for the rule fields and parameters): a field's default, as the
Default column shows it."""

from __future__ import annotations

from datetime import timedelta
from enum import Enum
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from supervisor.core.durations import format_duration


def field_default(info: FieldInfo, *, quote: str = "`") -> str:
    """`required`, `none`, a value in backticks (`` `30s` ``, `` `true` ``, `` `[a, b]` ``), or
    '' for a nested model (its own rows say); other text between `quote`s."""
    value = info.default
    if value is PydanticUndefined:
        return "none" if info.default_factory is not None else "required"
    if value is None or value == ():
        return "none"
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, timedelta):
        return f"`{format_duration(value)}`"
    if isinstance(value, Enum):
        return f"`{value.value}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(str(getattr(v, "value", v)) for v in value) + "]`"
    if isinstance(value, Path | int | float):
        return f"`{value}`"
    return f"{quote}{value}{quote}"
