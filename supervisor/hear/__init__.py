"""Hear: what the hosts say without being asked: systemd and launchd events streamed from each host
(streams), read per configured unit (units), and whether a host answers at all (reachability)."""
