"""The routes of each simulated flavour (vLLM, Ollama, mlx_lm) and the small endpoints."""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from fleet_lab.vllm_sim import auth
from fleet_lab.vllm_sim.audio import speech, transcriptions
from fleet_lab.vllm_sim.chat import admit, bad_request, handle_chat
from fleet_lab.vllm_sim.http import Request, Responder

if TYPE_CHECKING:
    from fleet_lab.vllm_sim.server import VllmSim

Handler = Callable[["VllmSim", Request, Responder], Awaitable[None]]
VLLM_VERSION = "0.32.0"
OLLAMA_VERSION = "0.33.0"
EMBEDDING_DIMENSIONS = 16


async def vllm_health(sim: VllmSim, request: Request, out: Responder) -> None:
    await out.send(503 if sim.behaviour.engine_dead else 200)


async def mlx_health(sim: VllmSim, request: Request, out: Responder) -> None:
    await out.send_json(200, {"status": "ok"})  # static: says nothing about the model


async def version(sim: VllmSim, request: Request, out: Responder) -> None:
    await out.send_json(
        200, {"version": OLLAMA_VERSION if sim.flavour == "ollama" else VLLM_VERSION}
    )


async def load(sim: VllmSim, request: Request, out: Responder) -> None:
    await out.send_json(200, {"server_load": sim.metrics.running})


async def models(sim: VllmSim, request: Request, out: Responder) -> None:
    created = int(sim.created)
    if sim.flavour == "vllm":
        entry: dict[str, Any] = {
            "id": sim.model,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": sim.model,
            "parent": None,
            "max_model_len": sim.max_model_len,
        }
    else:
        entry = {"id": sim.model, "object": "model", "created": created, "owned_by": "library"}
    await out.send_json(200, {"object": "list", "data": [entry]})


async def metrics(sim: VllmSim, request: Request, out: Responder) -> None:
    behaviour = sim.behaviour
    sim.metrics.advance_load(
        running=behaviour.load_running,
        waiting=behaviour.load_waiting,
        tok_s=behaviour.load_tok_s,
        hung=behaviour.engine_hung or behaviour.engine_dead,
    )
    text = sim.metrics.render(sim.model)
    if not behaviour.progress_metrics:
        progress = ("vllm:generation_tokens_total", "vllm:num_requests_running")
        text = "".join(
            line for line in text.splitlines(keepends=True) if not any(p in line for p in progress)
        )
    await out.send_text(200, text, "text/plain; version=0.0.4")


async def ollama_root(sim: VllmSim, request: Request, out: Responder) -> None:
    await out.send_text(200, "Ollama is running")


async def ollama_tags(sim: VllmSim, request: Request, out: Responder) -> None:
    digest = hashlib.sha256(sim.model.encode()).hexdigest()
    entry = {
        "name": sim.ollama_name,
        "model": sim.ollama_name,
        "modified_at": "2026-01-05T10:00:00.000000000Z",
        "size": 5_200_000_000,
        "digest": digest,
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "qwen3",
            "families": ["qwen3"],
            "parameter_size": "8.2B",
            "quantization_level": "Q4_K_M",
        },
        "capabilities": ["completion", "thinking"],
    }
    await out.send_json(200, {"models": [entry]})


async def _inference_body(sim: VllmSim, request: Request, out: Responder) -> dict[str, Any] | None:
    """`admit`, and a dead engine answers 500; None when an error answer was sent."""
    body = await admit(sim, request, out)
    if body is not None and sim.behaviour.engine_dead:
        await out.send_json(500, sim.failure_body(500))
        return None
    return body


async def _answer(sim: VllmSim, out: Responder, answer: dict[str, Any]) -> None:
    if sim.behaviour.bad_json:
        await out.send(200, json.dumps(answer)[:60].encode(), "application/json")
    else:
        await out.send_json(200, answer)


def embed(text: str) -> list[float]:
    """A deterministic unit vector from the text's hash."""
    digest = hashlib.sha256(text.encode()).digest()
    raw = [(byte - 127.5) / 127.5 for byte in digest[:EMBEDDING_DIMENSIONS]]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [round(x / norm, 6) for x in raw]


async def embeddings(sim: VllmSim, request: Request, out: Responder) -> None:
    body = await _inference_body(sim, request, out)
    if body is None:
        return
    given = body.get("input")
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        await bad_request(out, "input must be a string or a list of strings")
        return
    tokens = sum(len(t.split()) for t in texts)
    sim.metrics.prompt_tokens += tokens
    data = [{"index": i, "object": "embedding", "embedding": embed(t)} for i, t in enumerate(texts)]
    answer = {
        "id": f"embd-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": body["model"],
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
    }
    await _answer(sim, out, answer)


def _texts(documents: Any) -> list[str] | None:
    """Rerank documents are strings or `{"text": ...}` objects."""
    if not isinstance(documents, list) or not documents:
        return None
    texts = [d.get("text") if isinstance(d, dict) else d for d in documents]
    return (
        [t for t in texts if isinstance(t, str)] if all(isinstance(t, str) for t in texts) else None
    )


def relevance(query: str, document: str) -> float:
    """Share of the query's words found in the document, squeezed into (0, 1)."""
    wanted = {w.strip(".,?!").lower() for w in query.split()}
    found = {w.strip(".,?!").lower() for w in document.split()}
    share = len(wanted & found) / len(wanted) if wanted else 0.0
    return round(0.01 + 0.98 * share, 6)


async def rerank(sim: VllmSim, request: Request, out: Responder) -> None:
    body = await _inference_body(sim, request, out)
    if body is None:
        return
    query, texts = body.get("query"), _texts(body.get("documents"))
    if not isinstance(query, str) or not texts:
        await bad_request(out, "query (text) and documents (a list of texts) are required")
        return
    scored = sorted(((relevance(query, t), i, t) for i, t in enumerate(texts)), reverse=True)
    top_n = body.get("top_n")
    if isinstance(top_n, int) and top_n > 0:
        scored = scored[:top_n]
    results = [
        {"index": i, "document": {"text": t}, "relevance_score": score} for score, i, t in scored
    ]
    tokens = len(query.split()) + sum(len(t.split()) for t in texts)
    sim.metrics.prompt_tokens += tokens
    answer = {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": body["model"],
        "usage": {"total_tokens": tokens},
        "results": results,
    }
    await _answer(sim, out, answer)


Routes = Mapping[tuple[str, str], Handler]

ROUTES: Mapping[str, Routes] = MappingProxyType(
    {
        "vllm": {
            ("GET", "/health"): vllm_health,
            ("GET", "/ping"): vllm_health,
            ("POST", "/ping"): vllm_health,
            ("GET", "/version"): version,
            ("GET", "/load"): load,
            ("GET", "/v1/models"): models,
            ("GET", "/metrics"): metrics,
            ("POST", "/v1/chat/completions"): handle_chat,
            ("POST", "/v1/embeddings"): embeddings,
            ("POST", "/v1/rerank"): rerank,
            ("POST", "/v1/audio/speech"): speech,
            ("POST", "/v1/audio/transcriptions"): transcriptions,
        },
        "ollama": {
            ("GET", "/"): ollama_root,
            ("GET", "/api/version"): version,
            ("GET", "/api/tags"): ollama_tags,
            ("GET", "/v1/models"): models,
            ("POST", "/v1/chat/completions"): handle_chat,
            ("POST", "/v1/embeddings"): embeddings,
        },
        "mlx": {
            ("GET", "/health"): mlx_health,
            ("GET", "/v1/models"): models,
            ("POST", "/v1/chat/completions"): handle_chat,
        },
    }
)


async def route(sim: VllmSim, request: Request, out: Responder) -> None:
    if auth.refuses(sim.api_key, request.path, request.headers):
        await out.send_json(401, auth.UNAUTHORIZED)
        return
    routes = ROUTES[sim.flavour]
    handler = routes.get((request.method, request.path))
    if handler is not None:
        await handler(sim, request, out)
    elif any(path == request.path for _, path in routes):
        await _no_route(sim, out, 405)
    else:
        await _no_route(sim, out, 404)


_NO_ROUTE_TEXT: Mapping[str, Mapping[int, str]] = MappingProxyType(
    {
        "ollama": {404: "404 page not found", 405: "405 method not allowed"},  # Go's net/http
        "mlx": {404: "Not Found", 405: "Method Not Allowed"},
    }
)


async def _no_route(sim: VllmSim, out: Responder, status: int) -> None:
    if sim.flavour == "vllm":
        phrase = "Not Found" if status == 404 else "Method Not Allowed"
        await out.send_json(status, {"detail": phrase})  # FastAPI's shape
    else:
        await out.send_text(status, _NO_ROUTE_TEXT[sim.flavour][status])
