"""Progress, not just answers: what a server is doing when a real check fails or is slow.

`load` reads one snapshot of a server's load (vLLM's `/metrics`, Ollama's `/api/ps`);
`judge_progress` compares two snapshots taken a few seconds apart and says whether the server
is busy (tokens flowing with requests queued), hung (requests running, the token counter
frozen), idle (nothing to do, so a failed check is not explained by load) or unknown (no
signal: mlx_lm, a health URL, or the metrics did not answer).
"""
