"""Liveness checks: is the server up and does it say it serves the model?"""

from __future__ import annotations

from typing import Any

from supervisor.core.events import ProbeOutcome
from supervisor.probe.context import CheckFinding, ProbeContext, ProbeError
from supervisor.probe.http import excerpt, get_json, get_ok

_LIST_CHARS = 120


def not_served(model: str, served: list[str]) -> ProbeError:
    listed = ", ".join(served) if served else "nothing"
    return ProbeError(f"model '{model}' not served (serving: {excerpt(listed, _LIST_CHARS)})")


def _names(data: Any, list_key: str, name_key: str, where: str) -> list[str]:
    items = data.get(list_key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ProbeError(f"unexpected response from {where}: no '{list_key}' list")
    return [
        item[name_key]
        for item in items
        if isinstance(item, dict) and isinstance(item.get(name_key), str)
    ]


async def models_check(ctx: ProbeContext) -> CheckFinding:
    """`GET /v1/models` must list the endpoint's model by id."""
    ctx.check = "models"
    model = ctx.require_model()
    served = _names(await get_json(ctx, ctx.url("/v1/models")), "data", "id", "/v1/models")
    if model not in served:
        raise not_served(model, served)
    return CheckFinding(check="models", outcome=ProbeOutcome.OK, http_status=ctx.http_status)


async def openai_liveness(ctx: ProbeContext) -> CheckFinding:
    """`GET /health` 2xx, then `/v1/models`.

    vLLM with keep-alive on engine death answers /v1/models while /health says 503: /health
    goes first so that such a server fails.
    """
    ctx.check = "health"
    await get_ok(ctx, ctx.url("/health"))
    return await models_check(ctx)


def ollama_name(name: str) -> str:
    """`qwen3` and `qwen3:latest` are the same Ollama model (the tag is after the last `/`)."""
    last = name.rpartition("/")[2]
    return name if ":" in last else f"{name}:latest"


async def ollama_liveness(ctx: ProbeContext) -> CheckFinding:
    """`GET /api/tags` must list the model among `models[].name`."""
    ctx.check = "tags"
    model = ctx.require_model()
    served = _names(await get_json(ctx, ctx.url("/api/tags")), "models", "name", "/api/tags")
    if ollama_name(model) not in {ollama_name(name) for name in served}:
        raise not_served(model, served)
    return CheckFinding(check="tags", outcome=ProbeOutcome.OK, http_status=ctx.http_status)


async def http_check(ctx: ProbeContext) -> CheckFinding:
    """`GET url` must be 2xx (kind `health`: the URL is the full health URL)."""
    ctx.check = "http"
    response = await get_ok(ctx, ctx.endpoint.url)
    return CheckFinding(
        check="http",
        outcome=ProbeOutcome.OK,
        http_status=response.status_code,
        detail=excerpt(response.text, 120),
    )
