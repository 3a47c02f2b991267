"""`python -m fleet_lab.vllm_sim`: the simulated server as its own process."""

from fleet_lab.vllm_sim.cli import main

raise SystemExit(main())
