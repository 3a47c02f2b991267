"""The fleet config: one YAML file describing hosts, endpoints and probe settings.

`loader.load_config(path)` returns a frozen `models.FleetConfig` or raises
`errors.ConfigError`, whose `issues` list every problem found as `file:line: path: message`.
"""
