"""The Markdown table of every config key, generated from the models' field descriptions.

`docs/config-table.md` is this output (a test keeps them equal). Regenerate it with
`python -m supervisor.config.doctable > docs/config-table.md`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from supervisor.config.messages import model_at
from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.core.docgen import field_default

_SKIPPED = frozenset({"name", "source", "key_lines"})  # filled by the loader, not in the file
_DEFAULT_TEXT: Mapping[str, str] = {
    "endpoints": "required",
    "endpoints.NAME.startup_grace": "`defaults.startup_grace`",
    "endpoints.NAME.probe": "`defaults.probe`",
    "hosts.NAME.address": "required unless `local`",
    "endpoints.NAME.model": "required unless kind is `health`",
    "store.spill_dir": "`$STATE_DIRECTORY/spill` (systemd's `StateDirectory=`), else `spill` "
    "beside the config file",
    "store.spill_max": "`4MiB`",
}
_NOT_DESCENDED = frozenset({(Endpoint, "probe")})  # same keys as defaults.probe: one row

HEADER = "| Key | Meaning | Default |\n|---|---|---|\n"
FOOTER = (
    "\nDurations are written `500ms`, `90s`, `15m`, `2h` or `1h30m` (a bare number is an error)."
    " Relative paths are relative to the config file's folder; `~` is the home directory.\n"
)


def render_config_table() -> str:
    """Every key a fleet config file may hold: path, meaning, default."""
    rows = [f"| `{path}` | {meaning} | {default} |" for path, meaning, default in config_keys()]
    return HEADER + "\n".join(rows) + "\n" + FOOTER


def config_keys() -> list[tuple[str, str, str]]:
    """(key path, meaning, default) for every key, in the order of the models' fields."""
    return list(_rows(FleetConfig, ""))


def _rows(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str, str]]:
    for name, info in model.model_fields.items():
        if name in _SKIPPED:
            continue
        path = f"{prefix}{name}"
        yield (
            path,
            info.description or "",
            _DEFAULT_TEXT.get(path) or field_default(info, quote='"'),
        )
        if (model, name) in _NOT_DESCENDED:
            continue
        annotation = _strip_optional(info.annotation)
        origin = get_origin(annotation)
        if origin is None:
            inner = model_at(model, (name,))
            suffix = "."
        else:  # tuple[Model, ...] is a list of entries; Mapping[str, Model] is named entries
            inner = model_at(model, (name, "NAME"))
            suffix = "[]." if origin is tuple else ".NAME."
        if inner is not None:
            yield from _rows(inner, f"{path}{suffix}")


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


if __name__ == "__main__":
    print(render_config_table(), end="")
