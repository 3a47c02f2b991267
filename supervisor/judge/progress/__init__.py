"""Progress, not just answers: what a server is doing when a real check fails or is slow.

`load` reads one snapshot of a server's load (vLLM's `/metrics`, Ollama's `/api/ps`); `judge`
compares two snapshots taken a few seconds apart and says whether the server is busy (tokens
flowing with requests queued), hung (requests running, the token counter frozen), idle (nothing
to do, so a failed check is not explained by load) or unknown (no signal: mlx_lm, a health URL,
or the metrics did not answer).
"""

from supervisor.judge.progress.judge import Progress, Verdict, judge
from supervisor.judge.progress.load import Load, parse_vllm_metrics

__all__ = ["Load", "Progress", "Verdict", "judge", "parse_vllm_metrics"]
