"""A vLLM-shaped HTTP server (also Ollama- and mlx_lm-shaped): `python -m fleet_lab.vllm_sim`."""
