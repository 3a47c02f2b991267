"""`python -m fleet_lab.vllm_sim`: the simulated server as its own process.

Prints exactly one line, `READY http://HOST:PORT`, once it accepts connections; serves until
SIGTERM or SIGINT (exit 0). SIGUSR1 kills the "engine" (with `--exit-on-engine-death` the process
then exits 0 by itself, like vLLM 0.32 without keep-alive). Bad flags: one line on stderr, exit 2.

The vLLM flavour shuts down as vLLM's API server does (uvicorn): the first SIGTERM or SIGINT
stops accepting and waits for the requests in flight (`VllmSim.drain`), saying so on stderr in
uvicorn's words; with a hung engine they never finish, so the process does not exit (systemd
kills it after TimeoutStopSec). A second signal ends it at once, as uvicorn's force quit.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from fleet_lab.vllm_sim.control import ControlFile
from fleet_lab.vllm_sim.server import FLAVOURS, Flavour, SimBehaviour, VllmSim
from supervisor.core.durations import DurationError, parse_duration

PROG = "vllm_sim"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message}\n")


def _duration_s(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def _one_of(*choices: str) -> Callable[[str], str]:
    """Like argparse `choices`, with the same one-line message on every Python version."""

    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


def _int_between(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="A vLLM-shaped server for tests and drills. Prints `READY URL` once it "
        "listens; SIGTERM/SIGINT end it (exit 0); SIGUSR1 kills its engine.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=_int_between(0, 65535), default=0)
    add("--model", required=True)
    add("--flavour", type=_one_of(*FLAVOURS), default="vllm", help="vllm, ollama or mlx")
    add(
        "--reasoning-field",
        type=_one_of("reasoning", "reasoning_content", "none"),
        default="reasoning",
        help="where thinking text goes: reasoning, reasoning_content or none",
    )
    add("--tok-s", type=_non_negative, default=40.0, help="streamed pieces per second (0: unpaced)")
    add(
        "--cold-start", type=_duration_s, default=0.0, help="refuse connections this long, e.g. 30s"
    )
    add("--fail-status", type=_int_between(400, 599), default=None, help="inference calls fail")
    add("--engine-dead", action="store_true", help="start with a dead engine (keep-alive mode)")
    add("--hang", action="store_true", help="read requests, never answer")
    add("--bad-json", action="store_true", help="answer inference calls with broken JSON")
    add("--no-stream", action="store_true", help="answer chat whole even when asked to stream")
    add("--exit-on-engine-death", action="store_true", help="exit 0 soon after the engine dies")
    add(
        "--exit-delay",
        type=_duration_s,
        default=0.5,
        help="how soon after its engine died it exits, e.g. 1.5s (vLLM: 1.5-4.5 s)",
    )
    add(
        "--die-after-pieces",
        type=_int_between(1, 1_000_000),
        default=None,
        help="the engine dies after this many streamed pieces of one reply",
    )
    add("--max-model-len", type=_int_between(1, 10_000_000), default=32768)
    add("--api-key", default=None, help="as vLLM's: /v1 wants `Authorization: Bearer KEY`")
    add(
        "--load-running",
        type=_int_between(0, 100_000),
        default=0,
        help="other users' requests running",
    )
    add(
        "--load-waiting",
        type=_int_between(0, 100_000),
        default=0,
        help="other users' requests queued",
    )
    add("--load-tok-s", type=_non_negative, default=0.0, help="tokens/s the other users get")
    add("--queue", type=_duration_s, default=0.0, help="a new completion waits this long to run")
    add("--engine-hung", action="store_true", help="the engine stops stepping (/health still 200)")
    add(
        "--control-file",
        type=Path,
        default=None,
        help="JSON behaviour overrides, re-read when the file changes (drills flip modes)",
    )
    return parser


def behaviour_from(args: argparse.Namespace) -> SimBehaviour:
    return SimBehaviour(
        reasoning_field=None if args.reasoning_field == "none" else args.reasoning_field,
        tok_s=args.tok_s,
        fail_status=args.fail_status,
        engine_dead=args.engine_dead,
        hang=args.hang,
        bad_json=args.bad_json,
        no_stream=args.no_stream,
        cold_start_s=args.cold_start,
        exit_on_engine_death=args.exit_on_engine_death,
        exit_delay_s=args.exit_delay,
        die_after_pieces=args.die_after_pieces,
        load_running=args.load_running,
        load_waiting=args.load_waiting,
        load_tok_s=args.load_tok_s,
        queue_s=args.queue,
        engine_hung=args.engine_hung,
    )


async def serve(args: argparse.Namespace) -> int:
    flavour: Flavour = args.flavour
    sim = VllmSim(
        behaviour_from(args),
        model=args.model,
        flavour=flavour,
        max_model_len=args.max_model_len,
        api_key=args.api_key,
    )
    if args.control_file is not None:
        sim.control = ControlFile(args.control_file, sim.behaviour)
    try:
        await sim.start(args.host, args.port)
    except OSError as exc:
        print(f"{PROG}: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    stop, force = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        (force if stop.is_set() else stop).set()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, on_signal)
    loop.add_signal_handler(signal.SIGINT, on_signal)
    loop.add_signal_handler(signal.SIGUSR1, sim.kill_engine)
    stopped = asyncio.ensure_future(stop.wait())
    ready = asyncio.ensure_future(sim.wait_ready())
    closed = asyncio.ensure_future(sim.wait_closed())
    try:
        await asyncio.wait({stopped, ready}, return_when=asyncio.FIRST_COMPLETED)
        if ready.done():
            if flavour == "mlx":  # mlx_lm.server logs this as it starts serving
                port = sim.url.rsplit(":", 1)[1]
                started = f"Starting httpd at {args.host} on port {port}..."
                print(f"{_now()} - INFO - {started}", file=sys.stderr, flush=True)
            print(f"READY {sim.url}", flush=True)
            await asyncio.wait({stopped, closed}, return_when=asyncio.FIRST_COMPLETED)
            if stopped.done() and flavour == "vllm" and sim.held():
                await _drain(sim, force)
    finally:
        for waiter in (stopped, ready, closed):
            waiter.cancel()
        await sim.stop()
    return 0


async def _drain(sim: VllmSim, force: asyncio.Event) -> None:
    """uvicorn's graceful shutdown: wait for the requests in flight, or a second signal."""

    def say(text: str) -> None:
        print(f"INFO:     {text}", file=sys.stderr, flush=True)

    say("Shutting down")
    say("Waiting for connections to close. (CTRL+C to force quit)")
    drained = asyncio.ensure_future(sim.drain())
    forced = asyncio.ensure_future(force.wait())
    try:
        await asyncio.wait({drained, forced}, return_when=asyncio.FIRST_COMPLETED)
        finished = drained.done()
    finally:
        forced.cancel()
        drained.cancel()
    say("Finished server process" if finished else "Forced quit")


def _now() -> str:
    """The time as Python's logging prints it (mlx_lm's log format): `2026-11-24 21:14:02,118`."""
    now = datetime.now()
    return f"{now:%Y-%m-%d %H:%M:%S},{now.microsecond // 1000:03d}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return asyncio.run(serve(args))
