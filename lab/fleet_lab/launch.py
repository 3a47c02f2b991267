"""`python -m fleet_lab.launch ROLE ...`: what a lab launch script runs inside its container.

It walks vLLM's start-up in vLLM's order and fails from the same real causes, with vLLM's texts:

0. validate the config: prefix caching (`--enable-prefix-caching`) on the lab's model, which is
   hybrid (Mamba layers, block size 2128 in align mode), needs `--max-num-batched-tokens` of at
   least the block size: vLLM's `AssertionError: In Mamba cache align mode, ...` otherwise.
1. `head`: bind the pair's rendezvous (TCPStore) port, 29501, on its address. If something holds
   it, print c10d's bind line and torch's `DistNetworkError ... EADDRINUSE` and exit 1. `worker`:
   connect to the head's rendezvous port (retrying), like a headless worker.
2. read free memory from `/proc/meminfo` (in a lab host, the host's own file that drills set):
   with `--drop-caches PATH` (the lab host's own `/proc/sys/vm/drop_caches` file), a `3` (or
   `1`) written there since the last launch is applied first, as the kernel would have done at
   once: the page cache (`Cached`, `Buffers`) is given back to `MemFree`; then `MemFree` below
   `--gpu-memory-utilization` of `MemTotal` prints vLLM's `ValueError: Free memory on device
   cuda:0 ... on startup is less than desired GPU memory utilization` and exits 1.
3. claim the GPU (`--gpu PATH`, the host's own file): an exclusive `flock` on it stands for the
   device memory the engine pins while it lives (inherited by the server, released by the kernel
   when the last holder dies). Held by another process (an orphaned `VLLM::EngineCore` of an
   earlier run): PyTorch's `torch.OutOfMemoryError: CUDA out of memory` and exit 1.
4. import the real `mxfp4.py` from the container tree (`--mxfp4 PATH`) and run its
   `process_weights_after_loading()`; a duplicated patch block raises its `UnboundLocalError`.
5. start the engine's workers: with `VLLM_WORKER_MULTIPROC_METHOD=fork` in the environment (a
   launch drifted from the known-good script) the shared-memory broadcast fails with vLLM's
   `AttributeError: 'ShmRingBuffer' object has no attribute 'shared_memory'`.
6. `head`/`single`: exec the vLLM-shaped server (`fleet_lab.vllm_sim.server`), which inherits the
   rendezvous socket so the port stays bound while it serves; `worker`: stay up until SIGTERM.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import importlib.util
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

RENDEZVOUS_PORT = 29501
MEMINFO = Path("/proc/meminfo")
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
#: Values of drop_caches that free the page cache (2 frees only dentries and inodes).
DROPS_PAGE_CACHE = frozenset({"1", "3"})
GIB_KB = 1024 * 1024
PR_SET_NAME = 15
#: The lab's model is hybrid: in Mamba cache align mode (prefix caching) its block size is this.
MAMBA_BLOCK_SIZE = 2128
#: vLLM's default --max-num-batched-tokens.
DEFAULT_BATCHED_TOKENS = 2048
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 119.67 GiB of which 1.25 GiB is free. Including non-PyTorch memory, this "
    "process has 0 bytes memory in use. Of the allocated memory 0 bytes is allocated by "
    "PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
)
SHM_ERROR = "AttributeError: 'ShmRingBuffer' object has no attribute 'shared_memory'"

MXFP4 = "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/quantization/mxfp4.py"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="launch", description="A lab launch: vLLM's start-up checks, then the server."
    )
    parser.add_argument("role", choices=("head", "worker", "single"))
    parser.add_argument("--host", required=True, help="the address this node serves on")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="sim-model")
    parser.add_argument("--head-address", help="worker: the head's address")
    parser.add_argument("--rendezvous-port", type=int, default=RENDEZVOUS_PORT)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--mxfp4", help="the mxfp4.py to import (a path in the container)")
    parser.add_argument("--connect-within", type=float, default=60.0)
    parser.add_argument(
        "--drop-caches", type=Path, help="the drop_caches file whose `3` frees the page cache"
    )
    parser.add_argument("--gpu", type=Path, help="the file whose lock stands for GPU memory")
    parser.add_argument("--enable-prefix-caching", action="store_true")
    parser.add_argument("--max-num-batched-tokens", type=int, default=DEFAULT_BATCHED_TOKENS)
    return parser


def check_config(prefix_caching: bool, batched_tokens: int) -> None:
    """vLLM's config check for a hybrid model in Mamba cache align mode."""
    if prefix_caching and batched_tokens < MAMBA_BLOCK_SIZE:
        print(
            f"AssertionError: In Mamba cache align mode, block_size ({MAMBA_BLOCK_SIZE}) must be "
            f"<= max_num_batched_tokens ({batched_tokens}).",
            file=sys.stderr,
        )
        raise SystemExit(1)


def claim_gpu(path: Path) -> int:
    """Hold the GPU (an exclusive lock on `path`, kept across exec) or fail as PyTorch does when
    another process pins the memory."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        print(OOM, file=sys.stderr)
        raise SystemExit(1) from None
    os.set_inheritable(fd, True)
    return fd


def start_workers(environ: dict[str, str]) -> None:
    """The engine's shared-memory broadcast to its workers: broken by the fork method."""
    if environ.get("VLLM_WORKER_MULTIPROC_METHOD") == "fork":
        print("Traceback (most recent call last):", file=sys.stderr)
        print(
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/'
            'device_communicators/shm_broadcast.py", line 196, in __del__',
            file=sys.stderr,
        )
        print(SHM_ERROR, file=sys.stderr)
        raise SystemExit(1)


def bind_rendezvous(address: str, port: int) -> socket.socket:
    """The TCPStore's listening socket, or torch's EADDRINUSE failure and exit 1."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # like c10d's TCPStore: a restart may bind over its own TIME_WAIT leftovers, never over a
    # socket that still listens
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError:
        sock.close()
        print(
            f"[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:{port} "
            "(errno: 98 - Address already in use).",
            file=sys.stderr,
        )
        print(
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            f"local network address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, "
            "message: address already in use",
            file=sys.stderr,
        )
        raise SystemExit(1) from None
    sock.listen(16)
    os.set_inheritable(sock.fileno(), True)
    return sock


def connect_rendezvous(address: str, port: int, within: float) -> socket.socket:
    deadline = time.monotonic() + within
    while True:
        try:
            return socket.create_connection((address, port), timeout=1.0)
        except OSError:
            if time.monotonic() > deadline:
                print(
                    f"torch.distributed.DistStoreError: Timed out after {within:g} seconds "
                    f"waiting for clients. {address}:{port}",
                    file=sys.stderr,
                )
                raise SystemExit(1) from None
            time.sleep(0.2)


def check_memory(utilization: float, meminfo: Path = MEMINFO) -> None:
    """vLLM's start-up memory check against the (lab-controlled) meminfo."""
    fields: dict[str, int] = {}
    for line in meminfo.read_text().splitlines():
        key, _, rest = line.partition(":")
        if rest.split():
            fields[key] = int(rest.split()[0])
    total, free = fields["MemTotal"] / GIB_KB, fields["MemFree"] / GIB_KB
    if free < utilization * total:
        print(
            f"ValueError: Free memory on device cuda:0 ({free:.2f}/{total:.2f} GiB) on startup "
            f"is less than desired GPU memory utilization ({utilization}, "
            f"{utilization * total:.1f} GiB). Decrease GPU memory utilization or reduce GPU "
            "memory used by other processes.",
            file=sys.stderr,
        )
        raise SystemExit(1)


def apply_dropped_caches(drop_caches: Path, meminfo: Path = MEMINFO) -> bool:
    """If `1` or `3` was written into `drop_caches`, give the page cache back to `MemFree` in
    `meminfo` (a lab host's own file) and clear `drop_caches`. True when something was applied."""
    try:
        written = drop_caches.read_text().split()
    except OSError:
        return False
    if not written or written[-1] not in DROPS_PAGE_CACHE:
        return False
    kib: dict[str, int] = {}
    lines = meminfo.read_text().splitlines()
    for line in lines:
        key, _, rest = line.partition(":")
        if rest.split() and rest.split()[0].isdigit():
            kib[key] = int(rest.split()[0])
    freed = kib.get("Cached", 0) + kib.get("Buffers", 0)
    new = {"Cached": 0, "Buffers": 0}
    for key in ("MemFree", "MemAvailable"):
        if key in kib:
            new[key] = kib[key] + freed
    out = []
    for line in lines:
        key = line.partition(":")[0]
        out.append(f"{key + ':':<16}{new[key]:>9} kB" if key in new and key in kib else line)
    meminfo.write_text("\n".join(out) + "\n")  # in place: the host's /proc/meminfo is a bind
    drop_caches.write_text("")
    return True


def load_mxfp4(path: str) -> None:
    """Import the container's mxfp4.py and run its post-load step (its errors are vLLM's)."""
    spec = importlib.util.spec_from_file_location("vllm_mxfp4", path)
    if spec is None or spec.loader is None:
        print(f"ModuleNotFoundError: cannot load {path}", file=sys.stderr)
        raise SystemExit(1)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        module.process_weights_after_loading()
    except Exception:  # print vLLM's traceback as vLLM would, then fail
        traceback.print_exc()
        raise SystemExit(1) from None


def set_title(title: str) -> None:
    """Name this process like vLLM names its workers (`comm`, what `ss -p` and `ps` show;
    the kernel keeps 15 bytes: `VLLM::Worker_TP`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)


def _wait_for_term() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


def main(argv: Sequence[str] | None = None) -> NoReturn:
    given = list(sys.argv[1:] if argv is None else argv)
    cut = given.index("--") if "--" in given else len(given)
    args = _parser().parse_args(given[:cut])  # after `--`: the vllm_sim flags
    print(f"launch {args.role} on {args.host}", flush=True)
    check_config(args.enable_prefix_caching, args.max_num_batched_tokens)
    held: socket.socket | None = None
    if args.role == "head":
        held = bind_rendezvous(args.host, args.rendezvous_port)
    elif args.role == "worker":
        held = connect_rendezvous(
            args.head_address or args.host, args.rendezvous_port, args.connect_within
        )
    if args.drop_caches is not None:
        apply_dropped_caches(args.drop_caches)
    check_memory(args.gpu_memory_utilization)
    if args.gpu is not None:
        claim_gpu(args.gpu)
    if args.mxfp4:
        load_mxfp4(args.mxfp4)
    start_workers(dict(os.environ))
    if args.role == "worker":
        set_title("VLLM::Worker_TP1")
        _wait_for_term()
    sim = given[cut + 1 :]
    command = [sys.executable, "-m", "fleet_lab.vllm_sim"]
    command += ["--host", args.host, "--port", str(args.port), "--model", args.model, *sim]
    sys.stdout.flush()
    if held is not None:  # the rendezvous socket stays open (and bound) across exec
        os.set_inheritable(held.fileno(), True)
    os.execv(sys.executable, command)  # noqa: S606 - argv built here, no shell


if __name__ == "__main__":
    main()
