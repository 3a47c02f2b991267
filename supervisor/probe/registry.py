"""Which checks each endpoint kind runs: one table, not an if-chain.

A kind registers two small async functions, its liveness check and its deep check; adding a kind
is adding a row here (and to `supervisor.config.supervised.EndpointKind`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from supervisor.core.events import Tier
from supervisor.probe.audio import asr_check, health_liveness, tts_check
from supervisor.probe.completion import completion_check
from supervisor.probe.context import CheckFinding, ProbeContext
from supervisor.probe.inference import embedding_check, rerank_check
from supervisor.probe.liveness import http_check, models_check, ollama_liveness, openai_liveness

Check = Callable[[ProbeContext], Awaitable[CheckFinding]]


@dataclass(frozen=True, kw_only=True)
class KindChecks:
    """The two checks of one endpoint kind."""

    liveness: Check
    deep: Check

    def for_tier(self, tier: Tier) -> Check:
        return self.liveness if tier is Tier.LIVENESS else self.deep


CHECKS: Mapping[str, KindChecks] = MappingProxyType(
    {
        # vLLM, mlx_lm, llama.cpp: /health then /v1/models; a streamed chat completion
        "openai": KindChecks(liveness=openai_liveness, deep=completion_check),
        # Ollama: /api/tags; the same completion on its OpenAI-compatible route
        "ollama": KindChecks(liveness=ollama_liveness, deep=completion_check),
        # a plain health URL: GET it at both tiers
        "health": KindChecks(liveness=http_check, deep=http_check),
        "embedding": KindChecks(liveness=models_check, deep=embedding_check),
        "rerank": KindChecks(liveness=models_check, deep=rerank_check),
        # speech servers: /health; a real transcription of a clip, a real spoken phrase
        "asr": KindChecks(liveness=health_liveness, deep=asr_check),
        "tts": KindChecks(liveness=health_liveness, deep=tts_check),
    }
)
