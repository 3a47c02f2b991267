"""Shared test helpers: polling with a deadline (never a bare sleep) and fleet files."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from supervisor.core.aio import poll
from tests import warmstart
from tests.warmstart import WarmProcess

#: Probe settings that make a whole outage take well under a second.
FAST_PROBE: dict[str, Any] = {
    "liveness_interval": "100ms",
    "completion_interval": "400ms",
    "timeout": "1s",
    "failures_to_down": 2,
    "degraded_after": 2,
    "jitter": "0s",
    "progress_window": "200ms",
}


async def eventually(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    within: float = 10.0,
    what: str = "condition",
) -> None:
    """Poll `predicate` until it holds, first every 20 ms, then less often (at most 100 ms
    apart: a predicate that opens the store or reads a daemon's log costs CPU on each ask); fail
    with `what` after `within` seconds."""
    if not await poll(predicate, within, every=0.02, at_most=0.1):
        raise AssertionError(f"timed out after {within}s waiting for {what}")


def write_fleet(
    folder: Path,
    endpoints: Mapping[str, Mapping[str, Any]],
    *,
    hosts: Mapping[str, Mapping[str, Any]] | None = None,
    probe: Mapping[str, Any] | None = None,
    startup_grace: str = "0s",
    remediation: Mapping[str, Any] | None = None,
    playbook: str = "playbooks",
    http: Mapping[str, Any] | None = None,
) -> Path:
    """A fleet.yaml in `folder` with fast probes and its store in `folder/state`; observe-only
    (remediation dry run) and no HTTP endpoint unless `remediation` and `http` say otherwise."""
    document = {
        "store": {"path": "state/supervisor.db"},
        "playbook": {"path": playbook},
        "http": dict(http or {"enabled": False}),
        "remediation": dict(remediation or {"dry_run": True}),
        "defaults": {"probe": {**FAST_PROBE, **(probe or {})}, "startup_grace": startup_grace},
        "hosts": dict(hosts or {"forge": {"local": True}}),
        "endpoints": {name: dict(spec) for name, spec in endpoints.items()},
    }
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


async def spawn_daemon(config: Path, log: Path) -> WarmProcess:
    """`supervisor run` as a real process of its own on `config`, its JSON log appended to `log`
    (warm: forked from a process that has imported the daemon, `tests.warmstart`)."""
    with log.open("ab") as stderr:
        return await warmstart.spawn(
            ["--config", str(config), "run", "--log-format", "json"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


BENCH_HANG_GUARD_S = 500.0
"""How long a benchmark's smoke run may take before it counts as hung. Not a judgement of its
speed: each benchmark bounds its own waits and fails naming the one that ran out (a smoke run
takes 5-60 s, longer on a loaded machine). This only stops one that hangs outside them, before
pytest-timeout's 600 s (pyproject.toml), so that what it printed is shown."""


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def bench_smoke(root: Path, argv: Sequence[str], results: Path) -> str:
    """Run a benchmark (`argv`: the script, then its own options) in `--smoke` mode writing into
    `results` (which already holds another
    section, kept); returns the file's text once the script succeeded."""
    results.write_text("# Benchmark results\n\n## Other\n\nkept\n")
    command = [sys.executable, argv[0], "--smoke", *argv[1:], "--results", str(results)]
    try:
        done = subprocess.run(
            command,
            cwd=root,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            timeout=BENCH_HANG_GUARD_S,
            check=False,
        )
    except subprocess.TimeoutExpired as hung:
        said = [_text(hung.stdout)[-2000:], _text(hung.stderr)[-2000:]]
        raise AssertionError(f"{argv[0]} --smoke hung; it printed:\n" + "\n".join(said)) from None
    assert done.returncode == 0, done.stderr[-2000:]
    text = results.read_text()
    assert "## Other\n\nkept\n" in text
    return text
