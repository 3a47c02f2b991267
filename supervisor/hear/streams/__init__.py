"""Events from the hosts: what systemd says about the configured units, as it says it.

See docs/HOSTEVENTS.md. `HostEvents` runs one stream per host; each delivers `UnitEvent`s.
"""
