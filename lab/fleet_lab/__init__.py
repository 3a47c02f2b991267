"""The lab: stand-ins for the fleet's real servers, for tests and drills.

`fleet_lab.vllm_sim.server` is a vLLM-shaped HTTP server (also Ollama- and mlx_lm-shaped). The
modules are imported by name, not re-exported here, so that `python -m fleet_lab.vllm_sim`
runs the module only once.
"""
