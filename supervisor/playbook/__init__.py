"""The playbook: YAML rules that diagnose a failure from evidence and say how to repair it.

`load_playbook(folder)` gives the valid rules and every located problem; `diagnose(...)` gathers
evidence for one endpoint and finds the first rule that matches; `run_fixtures(...)` replays
recorded facts (`fleet-supervisor rules test`). `playbooks/README.md` documents the format.
"""
