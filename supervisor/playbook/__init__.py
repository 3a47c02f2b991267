"""The playbook: YAML rules that diagnose a failure from evidence and say how to repair it."""
