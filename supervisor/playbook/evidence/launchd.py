"""Collectors that ask launchd about the scope's job: `launchd_job` and `launchd_log`.

Both only read: `launchctl print` needs no root, in the `system` domain too (launchctl(1):
"Anyone may read or query the system domain"). The job's logs are the files its plist names as
`StandardOutPath` and `StandardErrorPath` (launchd.plist(5)), read by the SSH user: a LaunchAgent's
logs belong to that user; a LaunchDaemon's may need `as_root`. mlx_lm writes plain lines without
timestamps, so a log cannot be cut at the last passing check the way `journalctl --since` cuts the
journal: a file not written since the endpoint last passed (less 30 s for clock skew) is left
out, and of the others the last LINES lines are read.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from supervisor.config.fields import Flag
from supervisor.execute.base import CommandResult
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    CollectorParams,
    FactValue,
    NoEvidenceParams,
)
from supervisor.playbook.evidence.declare import (
    ScopeError,
    collector,
    failed,
    failure,
    found,
    run_read,
    scope_unit,
)
from supervisor.playbook.evidence.journal import journal_since, since_text
from supervisor.playbook.evidence.launchctl import (
    NOT_LOADED_FACTS,
    LaunchdJob,
    NotLaunchdError,
    is_not_found,
    job_facts,
    keep_alive,
    log_paths,
    parse_print,
    plutil_argv,
    print_argv,
)

MISSING = "No such file or directory"
LAST_LINES = 3

LAUNCHD_JOB_FACTS = {
    "loaded": "whether the domain holds the job (false: booted out or never bootstrapped)",
    "state": "`running`, `not running`, `spawn scheduled` (KeepAlive waits to start it again) "
    "...; '' when not loaded",
    "running": "state is `running` (or `xpcproxy`: being spawned, as during a kickstart) with "
    "a pid",
    "spawning": "state is `xpcproxy`: launchd is starting it this moment (not dead)",
    "keep_alive": "its plist's KeepAlive is true or a dictionary of conditions: launchd starts it "
    "again when it ends (`plutil -convert xml1 -o - PATH`); absent when the plist cannot be "
    "read",
    "pid": "the job's process (0 when none)",
    "runs": "how many times launchd started it since it was loaded",
    "last_exit_code": "the last exit status (absent when it never exited or a signal ended it)",
    "never_exited": "no run of it has ended yet (`(never exited)`)",
    "last_signal": "the signal that ended the last run, as launchd says it (`Killed: 9`), or ''",
    "last_signal_number": "that signal's number (9, 15 ...); absent when none",
    "last_exit": "how the last run ended, for messages: `signal Killed: 9`, `exit 1`, "
    "`never exited`, `not loaded`",
    "program": "the executable (`program =`)",
    "arguments": "the plist's ProgramArguments, joined by spaces",
    "stdout_path": "StandardOutPath ('' when unset)",
    "stderr_path": "StandardErrorPath ('' when unset)",
    "plist_path": "the plist launchd loaded it from (`path =`)",
}


class LogParams(CollectorParams):
    lines: Annotated[int, Field(strict=True, ge=1, le=100_000)] = Field(
        default=200, description="at most this many lines of each log (1-100000)"
    )
    as_root: Flag = Field(
        default=False, description="read the logs with `sudo -n` (a LaunchDaemon's may be root's)"
    )
    run_marker: Annotated[str, Field(strict=True, min_length=1)] | None = Field(
        default=None,
        description="a regex for the line the server logs when it starts (`Starting httpd at` "
        "for mlx_lm): each log keeps only the lines from its last such line on, so a run that "
        "ended before the latest start is not diagnosed again",
    )

    @field_validator("run_marker")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


def last_run(lines: list[str], marker: str | None) -> list[str]:
    """`lines` from the last one matching `marker` (all of them without a marker or a match)."""
    if marker is None:
        return lines
    regex = re.compile(marker)
    starts = [index for index, line in enumerate(lines) if regex.search(line)]
    return lines[starts[-1] :] if starts else lines


async def read_job(ctx: CollectContext) -> tuple[CommandResult, LaunchdJob | None]:
    """`launchctl print` of the scope's job: (the command, the job; None when not loaded).
    Raises `ScopeError` for a unit that is not a launchd job."""
    unit = scope_unit(ctx)
    try:
        argv = print_argv(unit)
    except NotLaunchdError as exc:
        raise ScopeError(str(exc)) from None
    result = await run_read(ctx, argv)
    if result.ok:
        return result, parse_print(result.stdout)
    if not result.error and is_not_found(result.exit_status, result.stderr):
        return result, None
    return result, LaunchdJob(keys={}, arguments=())


def _print_failed(result: CommandResult) -> bool:
    return not result.ok and not (
        not result.error and is_not_found(result.exit_status, result.stderr)
    )


@collector(
    "launchd_job",
    params=NoEvidenceParams,
    doc="the launchd job's state, pid, last exit or signal, runs, program arguments and log "
    "paths: `launchctl print DOMAIN/LABEL` (no root); whether it is kept alive: its plist, "
    "`plutil -convert xml1 -o - PATH`",
    facts=LAUNCHD_JOB_FACTS,
    needs_unit=True,
    service_manager="launchd",
)
async def launchd_job(ctx: CollectContext, params: NoEvidenceParams) -> CollectedEvidence:
    result, job = await read_job(ctx)
    if _print_failed(result):
        return failed(failure("launchctl print", result), result)
    if job is None:
        return found(NOT_LOADED_FACTS, result)
    facts = job_facts(job)
    plist = job.keys.get("path", "")
    if not plist.startswith("/"):
        return found(facts, result)
    read = await run_read(ctx, plutil_argv(plist))
    kept = keep_alive(read.stdout) if read.ok else None
    if kept is not None:
        facts["keep_alive"] = kept
    return found(facts, result, read)


def modified_epoch(result: CommandResult) -> int | None:
    """BSD `stat -f %m` -> seconds since the epoch of the last write; None when unreadable."""
    text = result.stdout.strip()
    return int(text) if result.ok and text.isascii() and text.isdigit() else None


@collector(
    "launchd_log",
    params=LogParams,
    doc="the tail of the job's StandardOutPath and StandardErrorPath files written since the "
    "endpoint last passed a check (less 30 s): `launchctl print`, `stat -f %m`, `tail -n LINES` "
    "(as the SSH user unless `as_root`)",
    facts={
        "text": "the last `lines` lines of each log written since `since` (stdout's, then "
        "stderr's), oldest first; with `run_marker`, each from its last start line on",
        "lines": "how many lines came back (0 when nothing was written since)",
        "last_lines": f"the last {LAST_LINES} non-blank lines of `text`, joined by ` | ` (for "
        "a message to a person)",
        "paths": "the job's log files that exist",
        "read": "those of them written since `since` (the ones `text` comes from)",
        "since": "30 s before the endpoint last passed a check (UTC), '' when it never did "
        "(then every log is read)",
    },
    needs_unit=True,
    service_manager="launchd",
)
async def launchd_log(ctx: CollectContext, params: LogParams) -> CollectedEvidence:
    printed, job = await read_job(ctx)
    if _print_failed(printed):
        return failed(failure("launchctl print", printed), printed)
    results = [printed]
    since = journal_since(ctx.last_ok_at)
    existing: list[str] = []
    read: list[str] = []
    texts: list[str] = []
    for path in log_paths(job) if job is not None else ():
        stat = await run_read(ctx, ["stat", "-f", "%m", "--", path], sudo=params.as_root)
        results.append(stat)
        if not stat.error and stat.exit_status == 1 and MISSING in stat.stderr:
            continue
        modified = modified_epoch(stat)
        if modified is None:
            return failed(failure("stat", stat), *results)
        existing.append(path)
        if since is not None and modified < since.timestamp():
            continue
        argv = ["tail", "-n", str(params.lines), "--", path]
        tail = await run_read(ctx, argv, sudo=params.as_root)
        results.append(tail)
        if not tail.ok:
            return failed(failure("tail", tail), *results)
        read.append(path)
        texts.extend(last_run(tail.stdout.splitlines(), params.run_marker))
    facts: dict[str, FactValue] = {
        "text": "\n".join(texts),
        "lines": len(texts),
        "last_lines": " | ".join([line.strip() for line in texts if line.strip()][-LAST_LINES:]),
        "paths": tuple(existing),
        "read": tuple(read),
        "since": since_text(since),
    }
    return found(facts, *results)
