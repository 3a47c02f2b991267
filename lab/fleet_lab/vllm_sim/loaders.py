"""`python -m fleet_lab.vllm_sim.loaders ollama|llama-swap ...`: the on-demand servers as
processes of their own, so a lab host can run them as units (`fleet_lab.fleet`).

- `ollama`: `OllamaOnDemand` with the models named by `--model` (each `--size` GiB loaded); with
  `--meminfo PATH` the memory a load may take is read from that file before each load
  (`MemAvailable`, else `MemFree`), as Ollama reads the system's free memory: on a lab host the
  host's own `/proc/meminfo`, which a drill rewrites.
- `llama-swap`: `LlamaSwap` in front of servers already running (`--upstream MODEL=URL`, each a
  `RunningUpstream`: started means its health check passed).

Each prints exactly one line, `READY http://HOST:PORT`, once it listens; its own log lines
(Ollama's, llama-swap's) go to stderr, so the unit's journal holds them. SIGTERM or SIGINT end
it (exit 0). Bad flags: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, Protocol

from fleet_lab.vllm_sim.ondemand import GIB, OllamaModel, OllamaOnDemand
from fleet_lab.vllm_sim.swap import LlamaSwap, RunningUpstream, SwapModel

PROG = "fleet_lab.vllm_sim.loaders"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message}\n")


class _Served(Protocol):
    @property
    def url(self) -> str: ...

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str: ...

    async def stop(self) -> None: ...


def _upstream(text: str) -> tuple[str, str]:
    model, sep, url = text.partition("=")
    if not sep or not model or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected MODEL=http://HOST:PORT, got {text!r}")
    return model, url


def build_loaders_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Ollama on demand, or a llama-swap-shaped router.")
    kinds = parser.add_subparsers(dest="kind", required=True, parser_class=_Parser)
    ollama = kinds.add_parser("ollama", help="Ollama: models loaded on demand")
    swap = kinds.add_parser("llama-swap", help="llama-swap in front of running servers")
    for each in (ollama, swap):
        each.add_argument("--host", default="127.0.0.1")
        each.add_argument("--port", type=int, default=0)
    ollama.add_argument("--model", action="append", required=True, help="e.g. qwen3:8b")
    ollama.add_argument("--size", type=float, default=6.0, help="GiB each model takes loaded")
    ollama.add_argument("--load-s", type=float, default=1.0, help="a model's load, seconds")
    ollama.add_argument("--keep-alive", default="5m", help="OLLAMA_KEEP_ALIVE")
    ollama.add_argument("--meminfo", type=Path, default=None, help="read free memory from here")
    swap.add_argument("--upstream", type=_upstream, action="append", required=True)
    swap.add_argument("--ttl", type=int, default=0, help="seconds idle before a stop; 0: never")
    swap.add_argument("--api-key", action="append", default=[], help="llama-swap's apiKeys")
    swap.add_argument("--health-check-timeout", type=float, default=15.0)
    return parser


def meminfo_available(path: Path) -> Callable[[], int]:
    """What `path` (a `/proc/meminfo`) says is free, in bytes: `MemAvailable`, else `MemFree`."""

    def read() -> int:
        kib: dict[str, int] = {}
        for line in path.read_text().splitlines():
            name, _, rest = line.partition(":")
            fields = rest.split()
            if fields and fields[0].isdigit():
                kib[name.strip()] = int(fields[0])
        return kib.get("MemAvailable", kib.get("MemFree", 0)) * 1024

    return read


def server_of(args: argparse.Namespace) -> _Served:
    if args.kind == "ollama":
        size = int(args.size * GIB)
        models = [OllamaModel(name=name, size=size) for name in args.model]
        available = None if args.meminfo is None else meminfo_available(args.meminfo)
        return OllamaOnDemand(
            models,
            keep_alive=args.keep_alive,
            load_s=args.load_s,
            log_stream=sys.stderr,
            available=available,
        )
    upstreams = {
        model: SwapModel(upstream=RunningUpstream(url), ttl=args.ttl)
        for model, url in args.upstream
    }
    return LlamaSwap(
        upstreams,
        api_keys=args.api_key,
        health_check_timeout=args.health_check_timeout,
        log_stream=sys.stderr,
    )


async def run_loader(args: argparse.Namespace) -> int:
    server = server_of(args)
    try:
        await server.start(args.host, args.port)
    except OSError as exc:
        print(f"{PROG}: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    try:
        print(f"READY {server.url}", flush=True)
        await stop.wait()
    finally:
        await server.stop()
    return 0


def run_main(argv: Sequence[str] | None = None) -> int:
    args = build_loaders_parser().parse_args(argv)
    return asyncio.run(run_loader(args))


if __name__ == "__main__":
    raise SystemExit(run_main())
