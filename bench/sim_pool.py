"""Many vLLM-shaped sims in one process: prints their URLs as one JSON line, then serves until
stdin closes or SIGTERM. `python bench/sim_pool.py --count 125`"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim


async def serve(count: int, model: str) -> None:
    sims = [VllmSim(SimBehaviour(tok_s=2000.0), model=model) for _ in range(count)]
    for sim in sims:
        await sim.start("127.0.0.1", 0)
    print(json.dumps([sim.url for sim in sims]), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    for sim in sims:
        await sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--model", default="m")
    args = parser.parse_args()
    asyncio.run(serve(args.count, args.model))


if __name__ == "__main__":
    main()
