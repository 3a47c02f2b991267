"""The playbook the daemon runs with: loaded at start, reloaded on SIGHUP and when the folder
changes. A reload that finds a broken file reports it and keeps the last good rule set in force;
at start, broken rules are disabled and the others run.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from supervisor.playbook.loader import Playbook, load_playbook

log = structlog.get_logger("supervisor.playbook")


def _signature(folder: Path) -> tuple[tuple[str, int, int], ...]:
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml"))
        return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    except OSError:
        return ()


class LivePlaybook:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.current = load_playbook(folder)
        self._seen = _signature(folder)
        for line in self.current.lines():
            log.warning("playbook problem", problem=line)
        log.info("playbook loaded", rules=len(self.current.rules), folder=str(folder))

    def __call__(self) -> Playbook:
        return self.current

    def reload(self) -> list[str]:
        """Load again; returns the problems. With errors, the rules in force stay as they were."""
        self._seen = _signature(self.folder)
        fresh = load_playbook(self.folder)
        problems = fresh.lines()
        for line in problems:
            log.warning("playbook problem", problem=line)
        if fresh.errors:
            log.error(
                "playbook reload refused: the last good rule set stays", errors=len(fresh.errors)
            )
            return problems
        self.current = fresh
        log.info("playbook reloaded", rules=len(fresh.rules))
        return problems

    def reload_if_changed(self) -> bool:
        """For the folder watch job: reload when a rule file was added, changed or removed."""
        if _signature(self.folder) == self._seen:
            return False
        self.reload()
        return True
