"""Deep checks for the non-chat kinds: a real embedding and a real rerank call."""

from __future__ import annotations

from typing import Any

from supervisor.core.events import ProbeOutcome
from supervisor.probe.context import CheckFinding, ProbeContext, ProbeError
from supervisor.probe.http import post_json

RERANK_QUERY = "What is the capital of France?"
RERANK_DOCUMENTS = ("Paris is the capital of France.", "Bananas are yellow.")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


async def embedding_check(ctx: ProbeContext) -> CheckFinding:
    """`POST /v1/embeddings`: `data[0].embedding` must be a non-empty list of numbers."""
    ctx.check = "embedding"
    payload = {"model": ctx.require_model(), "input": ctx.endpoint.probe.prompt}
    answer = await post_json(ctx, ctx.url("/v1/embeddings"), payload)
    data = answer.get("data") if isinstance(answer, dict) else None
    first = data[0] if isinstance(data, list) and data else None
    vector = first.get("embedding") if isinstance(first, dict) else None
    if not isinstance(vector, list) or not vector or not all(map(_is_number, vector)):
        raise ProbeError(
            "unexpected response: data[0].embedding is not a non-empty list of numbers",
            http_status=ctx.http_status,
        )
    return CheckFinding(
        check="embedding",
        outcome=ProbeOutcome.OK,
        http_status=ctx.http_status,
        detail=f"{len(vector)} dimensions",
    )


async def rerank_check(ctx: ProbeContext) -> CheckFinding:
    """`POST /v1/rerank` with two documents: each must get a numeric `relevance_score`."""
    ctx.check = "rerank"
    payload = {
        "model": ctx.require_model(),
        "query": RERANK_QUERY,
        "documents": list(RERANK_DOCUMENTS),
    }
    answer = await post_json(ctx, ctx.url("/v1/rerank"), payload)
    results = answer.get("results") if isinstance(answer, dict) else None
    scores: dict[int, float] = {}
    for item in results if isinstance(results, list) else []:
        index = item.get("index") if isinstance(item, dict) else None
        if isinstance(index, int) and _is_number(item.get("relevance_score")):
            scores[index] = float(item["relevance_score"])
    if set(scores) != set(range(len(RERANK_DOCUMENTS))):
        raise ProbeError(
            f"unexpected response: expected a relevance_score for each of "
            f"{len(RERANK_DOCUMENTS)} documents, got {len(scores)}",
            http_status=ctx.http_status,
        )
    shown = ", ".join(f"{scores[i]:.3f}" for i in sorted(scores))
    return CheckFinding(
        check="rerank",
        outcome=ProbeOutcome.OK,
        http_status=ctx.http_status,
        detail=f"scores {shown}",
    )
