"""Settle before diagnosing: when systemd (or launchd's KeepAlive) is about to restart a unit,
wait for that restart's outcome, so the diagnosis reads the latest attempt, not the last death.

The cause of a death (`signal 9`) and the reason the unit cannot come back (the next start exits
127) are different facts. A unit systemd will restart rests in `SubState=auto-restart` for its
`RestartSec=` (or is still `deactivating` from a death its `Restart=` policy answers); a launchd
job with KeepAlive shows `state = spawn scheduled` for its throttle interval. `wait_for_restarts`
reads each unit of the endpoint once; for each one about to be restarted it samples again every
`PAUSE` until the restart's outcome is known:

- `failed again`: the new attempt ended too (the unit rests again with a higher restart count
  and a new main process start, or the job's run count rose and it is not running);
- `running`: the new attempt has lived `SETTLE` (a crash-loop attempt lives less);
- `stopped`: the unit is inactive or failed (systemd gave up: `start-limit-hit`, or a person
  stopped it);
- `no outcome`: the bound ran out: `RestartSec` plus the start timeout (`TimeoutStartSec`, at
  most `START_CAP`) plus `SETTLE` and a little slack (for launchd: its `minimum runtime`, the
  throttle interval).

A unit whose host cannot be asked (an error) is not waited for: the diagnosis goes ahead.

Before that, a server whose engine died is about to exit. vLLM answers `/health` 503 only on
`EngineDeadError` (and a chat completion 500), and its API server then exits (code 0) 1.5-4.5 s
later. A diagnosis that began in between reads a unit still `active/running`: no rule about the
exit can match, and the catch-all would. So when the failed probe was one of those
(`engine_died`), `wait_for_exit` first
watches the endpoint's running units together, every `PAUSE`, until one of them exits (it
leaves `active/running`, or its main process changes) or `EXIT_WAIT` runs out: `exited`, or
`still running` (a server kept alive on engine death stays up, and is diagnosed as it is).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from supervisor.core.events import ProbeResult
from supervisor.execute.base import CommandResult
from supervisor.playbook.evidence.base import CollectContext, FactValue, Scope
from supervisor.playbook.evidence.launchctl import (
    NotLaunchdError,
    print_argv,
)
from supervisor.playbook.evidence.settling import MOVING, PAUSE, RESTING, SETTLE, attempt_of
from supervisor.playbook.evidence.unitstate import (
    LAUNCHD_THROTTLE,
    START_CAP,
    launchd_facts,
    systemd_facts,
)

SLACK = 1.0
#: how long a server whose engine died is given to exit (vLLM: within 4.5 s, API-FACTS)
EXIT_WAIT = 4.5 + SLACK

SHOW = (
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainCode",
    "ExecMainStatus",
    "MainPID",
    "NRestarts",
    "ActiveEnterTimestampMonotonic",
    "ExecMainStartTimestampMonotonic",
    "Restart",
    "RestartUSec",
    "TimeoutStartUSec",
)
#: signals after which `Restart=on-failure` does not restart (systemd.service(5): "clean")
_CLEAN_SIGNALS = frozenset({1, 2, 13, 15})
_EXITED, _KILLED, _DUMPED = 1, 2, 3  # ExecMainCode: CLD_EXITED, CLD_KILLED, CLD_DUMPED
SPAWN_SCHEDULED = "spawn scheduled"


class RestartOutcome(StrEnum):
    """How the restart a diagnosis waited for turned out."""

    RUNNING = "running"  #: the new attempt lived SETTLE
    FAILED = "failed again"  #: the new attempt ended too: its exit is the latest
    STOPPED = "stopped"  #: inactive or failed: nothing restarts it (start limit, a stop)
    NO_OUTCOME = "no outcome"  #: the bound ran out first
    UNREADABLE = "unreadable"  #: the unit could not be read again
    EXITED = "exited"  #: the server whose engine died exited (`wait_for_exit`)
    STILL_RUNNING = "still running"  #: it had not exited when EXIT_WAIT ran out


@dataclass(frozen=True, kw_only=True)
class Restart:
    """One wait for a restart: the unit, how it looked before and after, how long it took."""

    scope: str  #: `vllm-qwen.service@spark1`
    host: str
    unit: str
    before: str  #: `signal 9, auto-restart, 0 restarts`
    outcome: RestartOutcome
    after: str  #: `status=127, auto-restart, 1 restart`
    waited_s: float
    bound_s: float
    waited_for: str = "restart"  #: `restart`, or `exit` (a server whose engine died)

    def line(self) -> str:
        return (
            f"waited {self.waited_s:.1f}s (of up to {self.bound_s:.1f}s) for the "
            f"{self.waited_for} of {self.scope}: {self.outcome}: {self.after} "
            f"(before: {self.before})"
        )


def policy_fires(facts: Mapping[str, FactValue]) -> bool:
    """Whether the unit's `Restart=` restarts it after the death its last exit shows."""
    policy = facts.get("restart")
    code, status = facts.get("exec_main_code"), facts.get("exec_main_status")
    clean_exit = code == _EXITED and status == 0
    clean_signal = code == _KILLED and status in _CLEAN_SIGNALS
    unclean_signal = code in (_KILLED, _DUMPED) and not clean_signal
    match policy:
        case "always":
            return True
        case "on-success":
            return clean_exit or clean_signal
        case "on-failure":
            return not (clean_exit or clean_signal)
        case "on-abnormal" | "on-abort":
            return unclean_signal
    return False


def systemd_pending(facts: Mapping[str, FactValue]) -> bool:
    """systemd is about to restart the unit: it rests between two attempts, is still
    deactivating from a death its policy answers, or was just restarted (mid-attempt)."""
    if facts.get("sub_state") in RESTING:
        return True
    active = facts.get("active_state")
    if active == "deactivating":
        return policy_fires(facts)
    n_restarts = facts.get("n_restarts")
    return isinstance(n_restarts, int) and n_restarts > 0 and active in ("activating",)


def _systemd_words(facts: Mapping[str, FactValue]) -> str:
    code, status = facts.get("exec_main_code"), facts.get("exec_main_status")
    if code in (_KILLED, _DUMPED):
        exit_text = f"signal {status}"
    elif code == _EXITED:
        exit_text = f"status={status}"
    else:
        exit_text = "no exit yet"
    n = facts.get("n_restarts") or 0
    state = f"{facts.get('active_state')}/{facts.get('sub_state')}"
    return f"{exit_text}, {state}, {n} restart{'s' if n != 1 else ''}"


def _launchd_words(facts: Mapping[str, FactValue]) -> str:
    runs = facts.get("runs") or 0
    return f"{facts.get('last_exit')}, {facts.get('state') or 'not loaded'}, {runs} runs"


class _Watch:
    """Samples of one unit; says when its restart's outcome is known."""

    def __init__(self, first: Mapping[str, FactValue]) -> None:
        self.first = first  #: the sample that found the unit about to be restarted
        self._alive: tuple[object, float] | None = None  #: the attempt seen alive, since when

    def outcome(self, facts: Mapping[str, FactValue], at: float) -> RestartOutcome | None:
        raise NotImplementedError

    def _lived(self, attempt: object, at: float) -> RestartOutcome | None:
        """`running` once the same attempt has been seen alive for SETTLE."""
        if self._alive is None or self._alive[0] != attempt:
            self._alive = (attempt, at)
            return None
        return RestartOutcome.RUNNING if at - self._alive[1] >= SETTLE else None


class _SystemdWatch(_Watch):
    def outcome(self, facts: Mapping[str, FactValue], at: float) -> RestartOutcome | None:
        active = facts.get("active_state")
        if active in ("inactive", "failed"):
            return RestartOutcome.STOPPED
        base = self.first.get("n_restarts")
        now = facts.get("n_restarts")
        restarted = isinstance(now, int) and isinstance(base, int) and now > base
        # first seen mid-start (`activating`, not resting): that start is the one to watch
        first = self.first
        fresh = first.get("sub_state") not in RESTING and first.get("active_state") == "activating"
        if facts.get("sub_state") in RESTING:
            return (
                RestartOutcome.FAILED if (restarted and _ran_again(first, facts)) or fresh else None
            )
        if active in MOVING and active != "deactivating" and (restarted or fresh):
            return self._lived(attempt_of(facts), at)
        return None


def _ran_again(first: Mapping[str, FactValue], facts: Mapping[str, FactValue]) -> bool:
    """The unit's main process was started since `first` (`ExecMainStartTimestampMonotonic`
    moved; not shown by either: taken as so). systemd counts a restart (`NRestarts`) when it
    queues the start job, and the unit shows `auto-restart` with the last death's exit until
    that job runs: a loaded host once showed that moment, read as the restart failing again
    with `signal 9`."""
    before, now = first.get("exec_main_start_us"), facts.get("exec_main_start_us")
    return before != now or not (before or now)


class _LaunchdWatch(_Watch):
    def outcome(self, facts: Mapping[str, FactValue], at: float) -> RestartOutcome | None:
        if not facts.get("loaded"):
            return RestartOutcome.STOPPED
        base, now = self.first.get("runs"), facts.get("runs")
        restarted = isinstance(now, int) and isinstance(base, int) and now > base
        if not restarted:
            return None
        if facts.get("running"):
            return self._lived(facts.get("pid"), at)
        return RestartOutcome.FAILED


class _SystemdReading:
    @staticmethod
    def read(result: CommandResult) -> dict[str, FactValue] | None:
        return systemd_facts(result.stdout) if result.ok else None

    @staticmethod
    def pending(facts: Mapping[str, FactValue]) -> bool:
        return systemd_pending(facts)

    @staticmethod
    def bound(facts: Mapping[str, FactValue]) -> float:
        restart = facts.get("restart_s")
        start = facts.get("start_timeout_s")
        restart_s = restart if isinstance(restart, float) else 0.0
        start_s = min(start if isinstance(start, float) else START_CAP, START_CAP)
        return restart_s + start_s + SETTLE + SLACK

    @staticmethod
    def watch(facts: Mapping[str, FactValue]) -> _Watch:
        return _SystemdWatch(facts)

    @staticmethod
    def serving(facts: Mapping[str, FactValue]) -> bool:
        return (facts.get("active_state"), facts.get("sub_state")) == ("active", "running")

    @staticmethod
    def exited(first: Mapping[str, FactValue], facts: Mapping[str, FactValue]) -> bool:
        return not _SystemdReading.serving(facts) or attempt_of(facts) != attempt_of(first)

    @staticmethod
    def words(facts: Mapping[str, FactValue]) -> str:
        return _systemd_words(facts)


class _LaunchdReading:
    @staticmethod
    def read(result: CommandResult) -> dict[str, FactValue] | None:
        return launchd_facts(result)

    @staticmethod
    def pending(facts: Mapping[str, FactValue]) -> bool:
        return facts.get("state") == SPAWN_SCHEDULED

    @staticmethod
    def bound(facts: Mapping[str, FactValue]) -> float:
        throttle = facts.get("throttle_s")
        return (throttle if isinstance(throttle, float) else LAUNCHD_THROTTLE) + SETTLE + SLACK

    @staticmethod
    def watch(facts: Mapping[str, FactValue]) -> _Watch:
        return _LaunchdWatch(facts)

    @staticmethod
    def serving(facts: Mapping[str, FactValue]) -> bool:
        return bool(facts.get("loaded")) and bool(facts.get("running"))

    @staticmethod
    def exited(first: Mapping[str, FactValue], facts: Mapping[str, FactValue]) -> bool:
        again = (facts.get("pid"), facts.get("runs")) != (first.get("pid"), first.get("runs"))
        return not _LaunchdReading.serving(facts) or again

    @staticmethod
    def words(facts: Mapping[str, FactValue]) -> str:
        return _launchd_words(facts)


def _reading(scope: Scope) -> tuple[list[str], type[_SystemdReading] | type[_LaunchdReading]]:
    """The command that reads the scope's unit, and how its answer is read (NotLaunchdError for
    a launchd host's unit that is not a job)."""
    assert scope.unit is not None
    assert scope.host is not None
    if scope.host.service_manager == "launchd":
        return print_argv(scope.unit), _LaunchdReading
    show = ["systemctl", "show", scope.unit.unit, "-p", ",".join(SHOW), "--no-pager"]
    return show, _SystemdReading


_Reading = type[_SystemdReading] | type[_LaunchdReading]
_Sample = Callable[[], Awaitable[dict[str, FactValue] | None]]


@dataclass(frozen=True)
class _Read:
    """A scope's unit read once, and how to read it again."""

    reading: _Reading
    sample: _Sample
    first: Mapping[str, FactValue]


async def _read(ctx: CollectContext) -> _Read | None:
    """The scope's unit read once; None when it has no unit (or is a launchd host's unit that is
    not a job) or cannot be read."""
    scope = ctx.scope
    if scope.unit is None or scope.host is None:
        return None
    try:
        argv, reading = _reading(scope)
    except NotLaunchdError:
        return None
    host = scope.host

    async def sample() -> dict[str, FactValue] | None:
        result = await ctx.executor.run(host, argv, timeout=ctx.timeout, mutating=False)
        return reading.read(result)

    first = await sample()
    return None if first is None else _Read(reading=reading, sample=sample, first=first)


async def _settle_one(ctx: CollectContext) -> Restart | None:
    """The wait for one scope's unit, or None when nothing is about to restart it (or it cannot
    be read)."""
    read = await _read(ctx)
    if read is None or not read.reading.pending(read.first):
        return None
    reading, sample, first = read.reading, read.sample, read.first
    began = ctx.clock.monotonic()
    bound = reading.bound(first)
    watch = reading.watch(first)
    last: Mapping[str, FactValue] = first
    outcome: RestartOutcome | None = None
    while outcome is None:
        if ctx.clock.monotonic() + PAUSE > began + bound:
            outcome = RestartOutcome.NO_OUTCOME
            break
        await ctx.pause(PAUSE)
        facts = await sample()
        if facts is None:
            outcome = RestartOutcome.UNREADABLE
            break
        last = facts
        outcome = watch.outcome(facts, ctx.clock.monotonic())
    return _restart(ctx, reading, first, last, outcome, began=began, bound=bound)


def _restart(
    ctx: CollectContext,
    reading: _Reading,
    first: Mapping[str, FactValue],
    last: Mapping[str, FactValue],
    outcome: RestartOutcome,
    *,
    began: float,
    bound: float,
    waited_for: str = "restart",
) -> Restart:
    scope = ctx.scope
    assert scope.unit is not None
    assert scope.host is not None
    return Restart(
        scope=scope.label,
        host=scope.host.name,
        unit=scope.unit.unit,
        before=reading.words(first),
        outcome=outcome,
        after=reading.words(last),
        waited_s=round(ctx.clock.monotonic() - began, 3),
        bound_s=round(bound, 3),
        waited_for=waited_for,
    )


#: (check, HTTP status) of a failed probe that vLLM gives once its engine died: `/health` 503
#: (only on `EngineDeadError`) and a chat completion's 500 (`EngineCore encountered an issue`)
ENGINE_DEAD_ANSWERS = frozenset({("health", 503), ("completion", 500)})


def engine_died(trigger: ProbeResult | None) -> bool:
    """The failed probe may say the endpoint's engine died; vLLM's API server then exits a few
    seconds later. (A completion's 500 for another cause costs a wait that finds it running.)"""
    return trigger is not None and (trigger.check, trigger.http_status) in ENGINE_DEAD_ANSWERS


@dataclass
class _Serving:
    """A unit seen serving when the exit wait began, and how it looks now."""

    ctx: CollectContext
    reading: _Reading
    sample: _Sample
    first: Mapping[str, FactValue]
    last: Mapping[str, FactValue] | None = None  #: None once a reading failed

    @property
    def exited(self) -> bool:
        return self.last is not None and self.reading.exited(self.first, self.last)


async def _first_serving(ctx: CollectContext) -> _Serving | None:
    read = await _read(ctx)
    if read is None or not read.reading.serving(read.first):
        return None
    return _Serving(
        ctx=ctx, reading=read.reading, sample=read.sample, first=read.first, last=read.first
    )


async def _sample_again(unit: _Serving) -> None:
    unit.last = await unit.sample()


async def wait_for_exit(contexts: Sequence[CollectContext]) -> tuple[Restart, ...]:
    """The endpoint's engine died: its units that are serving, watched together until one of
    them exits (or cannot be read) or EXIT_WAIT runs out. One entry per unit watched, in scope
    order: `exited`, `still running` or `unreadable`."""
    found = await asyncio.gather(*(_first_serving(ctx) for ctx in contexts))
    units = [unit for unit in found if unit is not None]
    if not units:
        return ()
    clock, pause = units[0].ctx.clock, units[0].ctx.pause
    began = clock.monotonic()
    while clock.monotonic() + PAUSE <= began + EXIT_WAIT:
        await pause(PAUSE)
        await asyncio.gather(*(_sample_again(unit) for unit in units))
        if any(unit.last is None or unit.exited for unit in units):
            break
    return tuple(_exit_of(unit, began) for unit in units)


def _exit_of(unit: _Serving, began: float) -> Restart:
    if unit.last is None:
        outcome, last = RestartOutcome.UNREADABLE, unit.first
    else:
        last = unit.last
        outcome = RestartOutcome.EXITED if unit.exited else RestartOutcome.STILL_RUNNING
    return _restart(
        unit.ctx,
        unit.reading,
        unit.first,
        last,
        outcome,
        began=began,
        bound=EXIT_WAIT,
        waited_for="exit",
    )


async def wait_for_restarts(contexts: Sequence[CollectContext]) -> tuple[Restart, ...]:
    """Each scope's unit read once; those about to be restarted watched (together) until the
    outcome of that restart is known or its bound runs out. The waits, in scope order."""
    found = await asyncio.gather(*(_settle_one(ctx) for ctx in contexts))
    return tuple(restart for restart in found if restart is not None)
