"""The playbook the daemon runs with: loaded at start, reloaded on SIGHUP and when the folder
changes. At start and on every reload alike, a broken rule file is disabled (its problems
logged, `fleet-supervisor rules` shows why) and the other rules run. Only a folder that cannot be
read at all on a reload keeps the rules in force as they were.
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


def _log_problems(playbook: Playbook) -> list[str]:
    problems = playbook.lines()
    for line in problems:
        log.warning("playbook problem", problem=line)
    for file in playbook.disabled:
        log.error("rule disabled", file=file)
    return problems


class LivePlaybook:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.current = load_playbook(folder)
        self._seen = _signature(folder)
        _log_problems(self.current)
        log.info("playbook loaded", rules=len(self.current.rules), folder=str(folder))

    def __call__(self) -> Playbook:
        return self.current

    def reload(self) -> list[str]:
        """Load again; returns the problems. Broken rule files are disabled, the good ones (new,
        changed or unchanged) are in force."""
        self._seen = _signature(self.folder)
        fresh = load_playbook(self.folder)
        problems = _log_problems(fresh)
        if fresh.unreadable:
            log.error(
                "playbook folder unreadable: the rules in force stay", folder=str(self.folder)
            )
            return problems
        self.current = fresh
        log.info("playbook reloaded", rules=len(fresh.rules), disabled=len(fresh.disabled))
        return problems

    def reload_if_changed(self) -> bool:
        """For the folder watch job: reload when a rule file was added, changed or removed."""
        if _signature(self.folder) == self._seen:
            return False
        self.reload()
        return True
