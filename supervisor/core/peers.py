"""The peers' question (Patroni's DCS failsafe): a leader the store refuses cannot tell "the
store is down for everyone" from "I am cut off from it"; its peers can. Each instance answers
`GET /peer` (its `http.listen`, leader or follower, token in `Authorization: Bearer`): whether
it leads, with which epoch, and whether it reaches the store. A leader whose renewals the store
refuses asks every peer each sixth of the lease (`supervisor.app.leader.elector`), and steps
down when one leads with a newer epoch or reaches the store.

The token is a shared secret read from `store.peer_token_file`: it is never logged, never in an
answer, and compared in constant time.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.core.httpclient import HttpClient, HttpError, failure_reason

PATH = "/peer"
"""The route of the question, on every instance's HTTP side."""

ASK_S = 2.0
"""Seconds a peer has to answer (at most a third of the lease)."""


@dataclass(frozen=True, kw_only=True)
class PeerAnswer:
    """What one instance says of itself."""

    instance: str
    leading: bool
    epoch: int | None  #: its own while it leads; else the lease's as it last read it
    store: str  #: '' when it reaches the store, else why not

    def document(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "leading": self.leading,
            "epoch": self.epoch,
            "store": {"reachable": not self.store, "problem": self.store},
        }

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> PeerAnswer:
        """From a peer's JSON; raises ValueError when it is not an answer."""
        try:
            epoch = document["epoch"]
            store = document["store"]
            answer = cls(
                instance=str(document["instance"]),
                leading=bool(document["leading"]),
                epoch=None if epoch is None else int(epoch),
                store="" if store["reachable"] else str(store["problem"]),
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"not a peer's answer: {err}") from None
        return answer


@dataclass(frozen=True, kw_only=True)
class Asked:
    """One peer asked: its answer, or why there was none."""

    url: str
    answer: PeerAnswer | None
    failure: str = ""


@dataclass(frozen=True, kw_only=True)
class PeerDoor:
    """What an instance's HTTP side needs to answer the question: the shared token, and this
    instance's answer as it stands (`supervisor.app.leader.gate`)."""

    token: str
    answer: Callable[[], Awaitable[PeerAnswer]]


@dataclass(frozen=True, kw_only=True)
class Peers:
    """The peers a leader asks: their HTTP addresses and the shared token."""

    urls: tuple[str, ...]
    token: str


def read_peer_token(path: Path) -> str:
    """The shared token; raises OSError (unreadable) or ValueError (empty)."""
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"{path} is empty")
    return token


def authorized(header: str | None, token: str) -> bool:
    """Whether an `Authorization` header carries `token` (constant time)."""
    given = (header or "").removeprefix("Bearer ").strip()
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())


async def ask_one(client: HttpClient, url: str, token: str, within: float) -> Asked:
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with asyncio.timeout(within):
            reply = await client.get(url + PATH, headers=headers)
        if reply.status_code != 200:
            return Asked(url=url, answer=None, failure=f"HTTP {reply.status_code}")
        return Asked(url=url, answer=PeerAnswer.of(reply.json()))
    except TimeoutError:
        return Asked(url=url, answer=None, failure=f"no answer within {within:g}s")
    except HttpError as err:
        return Asked(url=url, answer=None, failure=failure_reason(err))
    except ValueError as err:
        return Asked(url=url, answer=None, failure=str(err))


async def ask_all(
    client: HttpClient, urls: Sequence[str], token: str, within: float
) -> list[Asked]:
    """Every peer at once; each answers within `within` seconds or counts as not answering."""
    return list(await asyncio.gather(*(ask_one(client, url, token, within) for url in urls)))
