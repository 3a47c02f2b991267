"""Params as a rule wrote them -> the collector's or action's params model, for one scope.

At load time the written params are validated as they are (placeholders in text fields pass as
text). At run time `resolve_params` fills the placeholders (the model's defaults included: an
action's `container` defaults to `"{unit.container}"`) and validates again, so the collector or
action always receives a checked model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from supervisor.playbook.facts import Facts
from supervisor.playbook.problems import first_error
from supervisor.playbook.templating import PlaceholderError, fill_params

M = TypeVar("M", bound=BaseModel)


class ParamsError(Exception):
    """Params that cannot be used in this scope: a placeholder's fact is missing (`missing`
    names it: `port.pids`), or the filled-in value does not fit the field. The message is one
    plain line."""

    def __init__(self, message: str, *, missing: str = "") -> None:
        super().__init__(message)
        self.missing = missing


def resolve_params(model: type[M], raw: Mapping[str, object], facts: Facts) -> M:
    """`raw` filled from `facts` and validated as `model`; raises `ParamsError`."""
    try:
        written = model.model_validate(raw)
    except ValidationError as exc:  # the loader checked them: only for params built elsewhere
        raise ParamsError(f"params.{first_error(exc, model)}") from None
    dumped = written.model_dump()
    try:
        filled = fill_params(dumped, facts)
    except PlaceholderError as exc:
        raise ParamsError(str(exc), missing=exc.name) from None
    if filled == dumped:
        return written
    try:
        return model.model_validate(filled)
    except ValidationError as exc:
        raise ParamsError(
            f"params.{first_error(exc, model)} (after filling placeholders)"
        ) from None
