"""From systemd's journal messages about a unit to unit events: a table of what systemd says
(by `MESSAGE_ID`, or by its text on a systemd without message ids) and what each means.

What systemd 252 logs (recorded in `tests/data/hostevents/`), in order, for one death with
`Restart=on-failure`:

    <the unit's own last lines, e.g. /bin/bash: /opt/x.sh: No such file or directory>
    vllm.service: Main process exited, code=exited, status=127/n/a     (EXIT_CODE, EXIT_STATUS)
    vllm.service: Failed with result 'exit-code'.                       (UNIT_RESULT)   -> failed
    vllm.service: Scheduled restart job, restart counter is at 1.       (N_RESTARTS)
    Stopped vllm.service - vLLM.                                        (JOB_TYPE=restart)
    Started vllm.service - vLLM.                                        (JOB_TYPE=start) -> started

A clean exit on its own is `Deactivated successfully.` without a `Stopping ...` before it
(-> exited); `systemctl stop` is `Stopping ...`, `Deactivated successfully.` or `Failed with
result ...`, then `Stopped ...` with JOB_TYPE=stop (-> stopped). The start limit is `Start
request repeated too quickly.`, then `Failed with result ...` and `Failed to start ...`
(-> crash_loop). A failure whose restart counter shows the unit already failed `crash_after - 1`
times in a row is a crash_loop too.

A unit's own line is an event only when it is in `LOAD_FAILURES`: a server that loads models on
demand saying a load a request asked for failed (-> load_failed; the unit keeps running, so
systemd says nothing). A load that only takes long logs none of these lines and is no event.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from supervisor.hear.streams.events import EventKind
from supervisor.hear.streams.journal import JournalEntry

MAX_LINES = 50  #: journal lines kept per unit (the newest), carried by its next event
CRASH_AFTER = 3  #: the third failure in a row (restart counter at 2) is a crash loop


@dataclass
class UnitTrack:
    """What the journal said so far about one unit."""

    lines: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_LINES))
    stopping: bool = False  #: a stop (or restart) job is running: its exit is no event
    restarting: bool = False  #: systemd scheduled an automatic restart
    start_limit: bool = False  #: systemd refused to start it again (start limit hit)
    exit_code: str = ""
    exit_status: int | None = None
    n_restarts: int | None = None


@dataclass(frozen=True, kw_only=True)
class Recognised:
    """A unit event as the journal alone tells it (the stream adds the host and the state)."""

    unit: str
    kind: EventKind
    message: str
    lines: tuple[str, ...]
    result: str = ""
    exit_code: str = ""
    exit_status: int | None = None
    n_restarts: int | None = None
    model: str = ""  #: load_failed: the model the line names


@dataclass(frozen=True)
class LoadFailure:
    """A server's own log line saying a model a request asked for did not load; `result` names
    it in the event (and in `event.result` for the rules)."""

    result: str
    pattern: re.Pattern[str]  #: its `model` group, when it has one, names the model


#: The load failures heard, by the servers' own words (their sources: docs/playbook.md).
LOAD_FAILURES: tuple[LoadFailure, ...] = (
    # Ollama (`llm/server.go`) before it answers 500 `model requires more system memory (X)
    # than is available (Y)`: `level=WARN source=server.go:... msg="model request too large for
    # system" requested=... available=...`
    LoadFailure("out-of-memory", re.compile(r'msg="model request too large for system"')),
    # llama-swap (`proxy/process.go`, `waitForCmd`): the upstream exited while it was starting,
    # by itself or stopped after `health check timed out after Ns`:
    # `[INFO] <MODEL> process exited but not StateStopping, current state: starting`
    LoadFailure(
        "upstream-start-failed",
        re.compile(
            r"<(?P<model>[^>]+)> process exited but not StateStopping, current state: starting"
        ),
    ),
)


def load_failure(message: str) -> tuple[LoadFailure, str] | None:
    """The load failure `message` reports, with the model it names ('' when none)."""
    for known in LOAD_FAILURES:
        if match := known.pattern.search(message):
            named = match.groupdict().get("model")
            return known, named or ""
    return None


def escalate(kind: EventKind, n_restarts: int | None, result: str, crash_after: int) -> EventKind:
    """`failed` becomes `crash_loop` at the start limit or when the restart counter says this is
    the `crash_after`-th failure in a row."""
    if kind is not EventKind.FAILED:
        return kind
    if result == "start-limit-hit" or (n_restarts or 0) + 1 >= crash_after:
        return EventKind.CRASH_LOOP
    return kind


Handler = Callable[[UnitTrack, JournalEntry, "re.Match[str] | None"], EventKind | None]


def _exited(track: UnitTrack, entry: JournalEntry, match: re.Match[str] | None) -> None:
    track.exit_code = entry.get("EXIT_CODE") or (match.group(1) if match else "")
    status = entry.number("EXIT_STATUS")
    track.exit_status = status if status is not None else _group_int(match, 2)


def _failed(track: UnitTrack, entry: JournalEntry, match: re.Match[str] | None) -> EventKind | None:
    return None if track.stopping else EventKind.FAILED


def _deactivated(
    track: UnitTrack, entry: JournalEntry, match: re.Match[str] | None
) -> EventKind | None:
    return None if track.stopping or track.restarting else EventKind.EXITED


def _restart_scheduled(track: UnitTrack, entry: JournalEntry, match: re.Match[str] | None) -> None:
    number = entry.number("N_RESTARTS")
    track.n_restarts = number if number is not None else _group_int(match, 1)
    track.restarting = True


def _start_limit(track: UnitTrack, entry: JournalEntry, match: re.Match[str] | None) -> None:
    track.start_limit = True


def _stopping(track: UnitTrack, entry: JournalEntry, match: re.Match[str] | None) -> None:
    track.stopping = True


def _stopped(
    track: UnitTrack, entry: JournalEntry, match: re.Match[str] | None
) -> EventKind | None:
    job = entry.get("JOB_TYPE")
    if job == "restart" or (not job and track.restarting and not track.stopping):
        track.stopping = False
        return None  # the middle of an automatic (or requested) restart
    track.stopping = track.restarting = track.start_limit = False
    track.n_restarts = 0
    return EventKind.STOPPED


def _started(
    track: UnitTrack, entry: JournalEntry, match: re.Match[str] | None
) -> EventKind | None:
    if entry.get("JOB_RESULT") not in ("", "done"):
        return None
    track.stopping = track.restarting = track.start_limit = False
    return EventKind.STARTED


def _group_int(match: re.Match[str] | None, group: int) -> int | None:
    if match is None or match.group(group) is None:
        return None
    return int(match.group(group))


@dataclass(frozen=True)
class SignalRule:
    name: str
    message_id: str  #: systemd's catalog id (systemd >= 248 tags all of these)
    pattern: re.Pattern[str]  #: the message text, for a systemd that does not tag it
    handle: Handler


RULES: tuple[SignalRule, ...] = (
    SignalRule(
        "process-exit",
        "98e322203f7a4ed290d09fe03c09fe15",
        re.compile(r": (?:Main|Control) process exited, code=(\w+), status=(\d+)"),
        _exited,
    ),
    SignalRule(
        "failure-result",
        "d9b373ed55a64feb8242e02dbe79a49c",
        re.compile(r": Failed with result '([\w-]+)'\.$"),
        _failed,
    ),
    SignalRule(
        "success",
        "7ad2d189f7e94e70a38c781354912448",
        re.compile(r": Deactivated successfully\.$"),
        _deactivated,
    ),
    SignalRule(
        "restart-scheduled",
        "5eb03494b6584870a536b337290809b3",
        re.compile(r": Scheduled restart job, restart counter is at (\d+)\.$"),
        _restart_scheduled,
    ),
    SignalRule(
        "start-limit", "", re.compile(r": Start request repeated too quickly\.$"), _start_limit
    ),
    SignalRule(
        "stopping",
        "de5b426a63be47a7b6ac3eaac82e2f6f",
        re.compile(r"^Stopping .*\.\.\.$"),
        _stopping,
    ),
    SignalRule(
        "stopped", "9d1aaa27d60140bd96365438aad20286", re.compile(r"^Stopped .*\.$"), _stopped
    ),
    SignalRule(
        "started", "39f53479d3a045ac8e11786248231fbf", re.compile(r"^Started .*\.$"), _started
    ),
)
_BY_ID = {rule.message_id: rule for rule in RULES if rule.message_id}


def _rule(entry: JournalEntry) -> tuple[SignalRule, re.Match[str] | None] | None:
    by_id = _BY_ID.get(entry.message_id)
    if by_id is not None:
        return by_id, by_id.pattern.search(entry.message)
    if entry.message_id:
        return None  # tagged, but not one of ours (`Failed to start`, `Failed to locate ...`)
    for rule in RULES:
        if match := rule.pattern.search(entry.message):
            return rule, match
    return None


class Recogniser:
    """Feeds journal entries of the watched units, in journal order; says which make events."""

    def __init__(self, units: tuple[str, ...], crash_after: int = CRASH_AFTER) -> None:
        self.units = units
        self._crash_after = crash_after
        self._tracks = {unit: UnitTrack() for unit in units}

    def feed(self, entry: JournalEntry) -> Recognised | None:
        track = self._tracks.get(entry.unit)
        if track is None:
            return None  # another unit (a line journalctl matched by another field)
        track.lines.append(entry.message)
        if not entry.from_systemd:
            return self._load_failed(entry, track)
        found = _rule(entry)
        if found is None:
            return None
        rule, match = found
        kind = rule.handle(track, entry, match)
        if kind is None:
            return None
        if kind is EventKind.STARTED:
            return Recognised(
                unit=entry.unit,
                kind=kind,
                message=entry.message,
                lines=(),
                n_restarts=track.n_restarts,
            )
        said = match.group(1) if rule.name == "failure-result" and match else ""
        result = _result(kind, track, entry, said)
        event = Recognised(
            unit=entry.unit,
            kind=escalate(kind, track.n_restarts, result, self._crash_after),
            message=entry.message,
            lines=tuple(track.lines),
            result=result,
            exit_code=track.exit_code,
            exit_status=track.exit_status,
            n_restarts=track.n_restarts,
        )
        track.lines.clear()  # the next down event carries the lines logged after this one
        track.exit_code, track.exit_status = "", None
        return event

    def _load_failed(self, entry: JournalEntry, track: UnitTrack) -> Recognised | None:
        found = load_failure(entry.message)
        if found is None:
            return None
        known, model = found
        return Recognised(
            unit=entry.unit,
            kind=EventKind.LOAD_FAILED,
            message=entry.message,
            lines=tuple(track.lines),
            result=known.result,
            model=model,
        )


def _result(kind: EventKind, track: UnitTrack, entry: JournalEntry, said: str) -> str:
    """systemd's `Result` for a down event: `UNIT_RESULT` (else the message's), `success` for a
    clean exit, `start-limit-hit` after the start limit (systemd 252 still says `exit-code`)."""
    if kind is EventKind.EXITED:
        return "success"
    if track.start_limit and kind is EventKind.FAILED:
        return "start-limit-hit"
    return entry.get("UNIT_RESULT") or said
