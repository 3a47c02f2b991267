"""Servers that load models on demand (Ollama; llama-swap or a router like it): what is loaded,
and a real check that never loads a model nor lengthens its residency.

Before the real check the server is asked what it has loaded (registered per `loader`: Ollama's
`/api/ps`, llama-swap's `/running`). A model that is not loaded is left so: the check ends
`idle` (the server answered). So is one whose keep-alive ends within the check's timeout (it
could be unloaded before the request arrives, which would load it again). A loaded model gets
the real check; on Ollama, whose every request sets the model's expiry to its own end plus the
server's `keep_alive` (the OpenAI routes have no field for it), the check then sets the expiry
back where `/api/ps` said it was (an empty `/api/generate` with `keep_alive` = the time that was
left: Ollama's documented way to change a loaded model's keep-alive without a prompt).
llama-swap has no route that leaves a model's `ttl` alone (`/upstream/<model>` resets it like
any request): a loaded model's real check there restarts its `ttl`, which docs/config.md says,
and nothing ever swaps a model in.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from types import MappingProxyType

from supervisor.core.events import ProbeOutcome
from supervisor.core.httpclient import HttpError, failure_reason
from supervisor.probe.context import CheckFinding, ProbeContext, ProbeError
from supervisor.probe.http import excerpt, get_json, one_line, post_json
from supervisor.probe.liveness import ollama_name

#: A keep-alive this far ahead is Ollama's "for ever" (a negative `keep_alive`): kept so.
FOREVER = timedelta(days=365)
_FRACTION = re.compile(r"(\.\d{6})\d+")


@dataclass(frozen=True, kw_only=True)
class Loaded:
    """What the server said about the endpoint's model."""

    loaded: bool
    expires_at: datetime | None = None  #: Ollama: when its keep-alive runs out
    listed: tuple[str, ...] = ()  #: every model it has loaded


Asker = Callable[[ProbeContext, str], Awaitable[Loaded]]


def parse_go_time(text: str) -> datetime | None:
    """An RFC 3339 time as Go writes it (nanoseconds, `Z` or an offset); None when it is not."""
    try:
        return datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00")))
    except ValueError:
        return None


def _entries(data: object, key: str, where: str) -> list[dict[str, object]]:
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ProbeError(f"unexpected response from {where}: no '{key}' list")
    return [item for item in items if isinstance(item, dict)]


async def ollama_loaded(ctx: ProbeContext, model: str) -> Loaded:
    """`GET /api/ps`: the loaded models, each with `expires_at`."""
    entries = _entries(await get_json(ctx, ctx.url("/api/ps")), "models", "/api/ps")
    names = [str(e.get("name") or e.get("model")) for e in entries]
    wanted = ollama_name(model)
    for entry, name in zip(entries, names, strict=True):
        if ollama_name(name) == wanted:
            expires = entry.get("expires_at")
            at = parse_go_time(expires) if isinstance(expires, str) else None
            return Loaded(loaded=True, expires_at=at, listed=tuple(names))
    return Loaded(loaded=False, listed=tuple(names))


async def swap_loaded(ctx: ProbeContext, model: str) -> Loaded:
    """`GET /running`: the models llama-swap runs (state `ready`)."""
    entries = _entries(await get_json(ctx, ctx.url("/running")), "running", "/running")
    ready = tuple(str(e.get("model")) for e in entries if e.get("state", "ready") == "ready")
    return Loaded(loaded=model in ready, listed=ready)


ASKERS: Mapping[str, Asker] = MappingProxyType({"ollama": ollama_loaded, "llama-swap": swap_loaded})
"""How each `on_demand` server is asked what it has loaded."""


def idle_reason(model: str, loaded: Loaded) -> str:
    listed = ", ".join(loaded.listed) or "nothing"
    return f"{model} is not loaded (loaded: {excerpt(listed, 120)}); the probe leaves it so"


def ending_reason(model: str, timeout_s: float) -> str:
    return (
        f"{model} unloads within the probe's timeout ({timeout_s:g}s); the probe leaves it "
        "(a real check now could load it again)"
    )


async def gentle(
    ctx: ProbeContext, deep: Callable[[ProbeContext], Awaitable[CheckFinding]]
) -> CheckFinding:
    """The real check `deep` of an on-demand endpoint, without loading or keeping its model."""
    ctx.check = "loaded"
    model = ctx.require_model()
    loaded = await ASKERS[ctx.endpoint.loader](ctx, model)
    left = loaded.expires_at - ctx.clock.now() if loaded.expires_at is not None else None
    ending = left is not None and left < timedelta(seconds=ctx.timeout_s)
    if not loaded.loaded or ending:
        reason = ending_reason(model, ctx.timeout_s) if ending else idle_reason(model, loaded)
        return CheckFinding(
            check="loaded",
            outcome=ProbeOutcome.IDLE,
            reason=reason,
            http_status=ctx.http_status,
        )
    found = await deep(ctx)
    if ctx.endpoint.loader == "ollama" and loaded.expires_at is not None:
        status = ctx.http_status
        kept = await _keep_until(ctx, model, loaded.expires_at)
        ctx.http_status = status
        if kept:
            return replace(found, detail=_joined(found.detail, kept))
    return found


def _joined(detail: str, more: str) -> str:
    return f"{detail}; {more}" if detail else more


async def _keep_until(ctx: ProbeContext, model: str, expires_at: datetime) -> str:
    """Set the model's expiry back to `expires_at`; '' when done, else why not (a detail)."""
    left = expires_at - ctx.clock.now()
    seconds = -1.0 if left > FOREVER else max(0.0, left.total_seconds())
    check = ctx.check
    body = {"model": model, "keep_alive": seconds, "stream": False}
    try:
        await post_json(ctx, ctx.url("/api/generate"), body)
    except ProbeError as exc:
        return f"keep-alive not set back: {one_line(exc.reason)}"
    except HttpError as exc:
        return f"keep-alive not set back: {failure_reason(exc)}"
    finally:
        ctx.check = check
    return ""
