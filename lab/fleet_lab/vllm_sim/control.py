"""A standalone sim's control file: JSON overrides of its behaviour, re-read when it changes.

A drill writes `{"load_running": 48, "load_waiting": 20, "load_tok_s": 940, "queue_s": 60}` to
saturate the server a unit runs, or `{"engine_hung": true, "load_running": 3}` to hang its engine,
without restarting the unit (its MainPID stays). `{}` (or removing the file) restores the
behaviour the process started with. Unknown keys and bad JSON are logged and ignored. With
`"pid": N` the overrides apply to process N only: a hang that a restart of the unit ends.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import fields, replace
from pathlib import Path

from fleet_lab.vllm_sim.server import SimBehaviour

_log = logging.getLogger(__name__)
_KNOWN = frozenset(f.name for f in fields(SimBehaviour))


class ControlFile:
    def __init__(self, path: Path, started: SimBehaviour) -> None:
        self.path = path
        self._started = replace(started)
        self._seen: float | None = None

    def poll(self, current: SimBehaviour) -> SimBehaviour:
        """The behaviour to use now: `current` when the file did not change since the last poll,
        else the started behaviour with the file's overrides."""
        try:
            mtime: float | None = self.path.stat().st_mtime_ns
        except OSError:
            mtime = None
        if mtime == self._seen:
            return current
        self._seen = mtime
        if mtime is None:
            return replace(self._started)
        try:
            overrides = json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError) as exc:
            _log.warning("vllm_sim: control file %s ignored: %s", self.path, exc)
            return current
        if not isinstance(overrides, dict):
            _log.warning("vllm_sim: control file %s ignored: not a JSON object", self.path)
            return current
        only = overrides.pop("pid", None)
        if only is not None and only != os.getpid():
            return replace(self._started)  # meant for a process that has since been replaced
        unknown = sorted(set(overrides) - _KNOWN)
        if unknown:
            _log.warning("vllm_sim: control file %s: unknown keys %s", self.path, unknown)
        known = {k: v for k, v in overrides.items() if k in _KNOWN}
        return replace(self._started, **known)
