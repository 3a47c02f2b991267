"""Notification latency: from a state change's timestamp in the store's timeline to the Bot API
stub receiving the message. The daemon is a real `supervisor run` process with the notifier's
default timings, its Telegram client pointed at `BotApiStub`; vLLM-shaped sims are stopped
(down: the "opened" message) and started again (healthy: the "resolved" one), one at a time.

    .venv/bin/python bench/notify.py            # 40 state changes over 4 sims, writes RESULTS.md
    .venv/bin/python bench/notify.py --smoke    # 2 changes (one outage), ~10 s, writes nothing
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, median, ms, percentile, until, write_section
from fleet_lab.botapi import BotApiStub, Sent
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.record.store.outbox import OutboxStore
from supervisor.record.store.store import Store
from supervisor.record.timeline.base import EntryKind
from supervisor.tell.telegram.timing import Timing

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "123456:bench-token"  # noqa: S105 (the local stub's, not a secret)
CHAT, USER = -1001, 11
#: Probe settings: they only decide how soon a change is detected, which is not measured here.
PROBE = {
    "liveness_interval": "200ms",
    "completion_interval": "1s",
    "timeout": "1s",
    "failures_to_down": 2,
    "jitter": "0s",
}
_INCIDENT = re.compile(r"\nincident #(\d+)$")
_DEST = re.compile(r"^\S+ -> (\S+): ")


@dataclass(frozen=True, kw_only=True)
class Change:
    """One state change and the message it gave."""

    endpoint: str
    dest: str  #: "down" or "healthy"
    at: float  #: the transition's timestamp in the timeline (epoch seconds)
    queued_at: float  #: the composer put the message in the outbox (epoch seconds)
    received_at: float  #: the stub received the sendMessage (epoch seconds)

    @property
    def latency(self) -> float:
        return self.received_at - self.at

    @property
    def composing(self) -> float:
        return self.queued_at - self.at


def fleet(folder: Path, stub: BotApiStub, urls: list[str]) -> Path:
    (folder / "playbooks").mkdir(exist_ok=True)
    (folder / "token").write_text(TOKEN + "\n")
    document = {
        "store": {"path": "state/supervisor.db"},
        "playbook": {"path": "playbooks"},
        "http": {"enabled": False},
        "remediation": {"dry_run": True},
        # each outage is its own incident (the default 10m would make them one flapping one)
        "defaults": {"probe": PROBE, "startup_grace": "0s", "reopen_within": "0s"},
        "hosts": {"forge": {"local": True}},
        "endpoints": {
            f"e{i}": {"kind": "openai", "url": url, "model": "m", "host": "forge"}
            for i, url in enumerate(urls)
        },
        "notify": {
            "telegram": {
                "token_file": str(folder / "token"),
                "chat_ids": [CHAT],
                "user_ids": [USER],
                "base_url": stub.base_url,
            }
        },
    }
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


async def start_daemon(config: Path, log: Path) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    with log.open("wb") as err:
        return await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "supervisor", "--config", str(config)),
            *("run", "--log-format", "json"),
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=err,
        )


def _count(stub: BotApiStub, mark: str, name: str) -> int:
    return sum(1 for s in stub.sent if s.text.startswith(f"{mark} <b>{name}</b>"))


class Bench:
    """The stub, the sims and the daemon of one run; `outage` breaks and heals one sim."""

    def __init__(self, stub: BotApiStub, sims: list[VllmSim], store: Store) -> None:
        self.stub, self.sims, self.store = stub, sims, store
        self.pending = OutboxStore(store).pending
        self._phase = random.Random(7)

    async def settled(self) -> bool:
        """The bot is idle: nothing queued, its last message a pacing gap ago (each change is
        measured alone, not queued behind the one before)."""
        gap = Timing().pacing.per_chat
        if self.stub.sent and time.time() - self.stub.sent[-1].received_at < gap:
            return False
        return not await self.pending()

    async def all_healthy(self) -> bool:
        states = [s.state for s in await self.store.snapshots()]
        return len(states) == len(self.sims) and set(states) == {"healthy"}

    async def outage(self, index: int) -> None:
        sim, name = self.sims[index], f"e{index}"
        port = int(sim.url.rsplit(":", 1)[1])
        await self.change(name, "🔴", sim.stop)
        await self.change(name, "✅", lambda: sim.start("127.0.0.1", port))

    async def change(self, name: str, mark: str, act: Callable[[], Awaitable[object]]) -> None:
        """Once the bot is idle, `act`; then wait for `name`'s message starting with `mark`."""
        await until(self.settled, within=60, what="idle bot")
        # "idle" is reached in step with the composer's cycle: a random pause puts the change
        # at a random point of that cycle (else every change would land at the same point)
        await asyncio.sleep(self._phase.uniform(0, Timing().compose_every))
        before = _count(self.stub, mark, name)
        await act()
        await until(
            lambda: _count(self.stub, mark, name) > before, within=60, what=f"{mark} for {name}"
        )


async def polling(stub: BotApiStub, daemon: asyncio.subprocess.Process, log: Path) -> None:
    """The daemon's bot polls for updates (so its store is open and its outbox ready)."""

    def up() -> bool:
        if daemon.returncode is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the daemon exited ({daemon.returncode}):\n{tail}")
        return "getUpdates" in stub.calls

    await until(up, within=60, what="bot polling")


async def matched(store: Store, sent: list[Sent]) -> list[Change]:
    """Each opened/resolved message paired with its transition in its incident's timeline."""
    first: dict[int, Sent] = {}  # incident -> its opened message (the thread's first)
    for s in sent:
        found = _INCIDENT.search(s.text)
        if s.text.startswith("🔴") and found:
            first[int(found.group(1))] = s
    thread = {s.message_id: incident for incident, s in first.items()}
    last: dict[int, Sent] = {}  # incident -> its resolved message (a reply in the thread)
    for s in sent:
        if s.text.startswith("✅") and s.reply_to in thread:
            last[thread[s.reply_to]] = s
    queued = {(r.incident_id, r.kind): r.created_at for r in await OutboxStore(store).messages()}
    kinds = {"down": "opened", "healthy": "resolved"}
    changes: list[Change] = []
    for incident in sorted(first):
        messages = {"down": first[incident], "healthy": last.get(incident)}
        for entry in await store.timeline(incident):
            found = _DEST.match(entry.summary) if entry.kind is EntryKind.TRANSITION else None
            dest = found.group(1) if found else ""
            message = messages.pop(dest, None)
            if message is None:
                continue
            change = Change(
                endpoint=entry.subject,
                dest=dest,
                at=entry.at.timestamp(),
                queued_at=queued[(incident, kinds[dest])].timestamp(),
                received_at=message.received_at,
            )
            changes.append(change)
    return changes


async def measure(changes: int, count: int) -> list[Change]:
    stub = BotApiStub(token=TOKEN)
    await stub.start()
    sims = [VllmSim(SimBehaviour(tok_s=2000.0), model="m") for _ in range(count)]
    for sim in sims:
        await sim.start("127.0.0.1", 0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            config = fleet(folder, stub, [sim.url for sim in sims])
            log = folder / "daemon.log"
            daemon = await start_daemon(config, log)
            try:
                await polling(stub, daemon, log)
                db = folder / "state" / "supervisor.db"
                async with await Store.open(db, create=False) as store:
                    bench = Bench(stub, sims, store)
                    await until(bench.all_healthy, within=60, what="every sim healthy")
                    outages = (changes + 1) // 2
                    for outage in range(outages):
                        await bench.outage(outage % count)
                    await until(bench.settled, within=60, what="idle bot")
                    found = await matched(store, stub.sent)
                    if len(found) != 2 * outages:
                        raise RuntimeError(
                            f"only {len(found)} of {2 * outages} state changes matched a message"
                        )
                    return found
            finally:
                if daemon.returncode is None:
                    daemon.terminate()
                await asyncio.wait_for(daemon.wait(), timeout=60)
    finally:
        for sim in sims:
            await sim.stop()
        await stub.stop()


def row(label: str, changes: list[Change]) -> str:
    values = [c.latency for c in changes]
    worst = max(values) if values else float("nan")
    composing = median([c.composing for c in changes])
    return (
        f"| {label} | {len(values)} | {ms(median(values))} | {ms(percentile(values, 95))} "
        f"| {ms(worst)} | {ms(composing)} |"
    )


async def bench(changes: int, count: int, results: Path | None) -> None:
    found = await measure(changes, count)
    down = [c for c in found if c.dest == "down"]
    healthy = [c for c in found if c.dest == "healthy"]
    timing = Timing()
    pacing = timing.pacing
    body = "\n".join(
        [
            f"The daemon as a real process supervising {count} vLLM-shaped sims on loopback, "
            "its Telegram client (python-telegram-bot) talking HTTP to the Bot API stub "
            f"(`lab/fleet_lab/botapi.py`); {len(found)} state changes, each made while the bot "
            "was idle: a sim stopped (down: the opened message) or started again (healthy: the "
            "resolved one). Latency is from the transition's timestamp in the store's timeline "
            "to the stub receiving the sendMessage. The notifier's default timings, as a user "
            "gets them: the composer is woken when the store commits a timeline entry (and "
            f"reads it every {timing.compose_every:g} s for reminders), the "
            f"sender sends at most one message per chat every {pacing.per_chat:g} s, looks at "
            f"an idle outbox every {pacing.idle_poll:g} s and is woken as soon as a message "
            f"is queued (retries from {pacing.retry.base_s:g} s up to {pacing.retry.cap_s:g} s). "
            "Detection time is not in these figures; each change is made at a random point of "
            "the composer's 1 s round. The last column is the part of the latency spent before the "
            "composer queued the message (the rest is the sender and the HTTP call).",
            "",
            "| state change | messages | median | p95 | max | of which composing (median) |",
            "|---|---|---|---|---|---|",
            row("down (🔴 opened)", down),
            row("healthy (✅ resolved)", healthy),
            row("all", down + healthy),
        ]
    )
    write_section("Notification latency", body, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds; writes nothing")
    parser.add_argument("--changes", type=int, default=40, help="state changes (two per outage)")
    parser.add_argument("--sims", type=int, default=4)
    parser.add_argument("--results", type=Path, default=None, help=f"default {RESULTS}")
    args = parser.parse_args()
    if args.changes < 2 or args.sims < 1:
        parser.error("--changes must be at least 2 and --sims at least 1")
    try:
        if args.smoke:
            asyncio.run(bench(2, 1, args.results))
        else:
            asyncio.run(bench(args.changes, args.sims, args.results or RESULTS))
    except (RuntimeError, TimeoutError) as exc:
        sys.exit(f"notify: {exc}")


if __name__ == "__main__":
    main()
