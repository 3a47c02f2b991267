"""Whether a peer address is loopback (the control API's and the page's rule)."""

from __future__ import annotations

import ipaddress


def is_loopback(peer: str) -> bool:
    try:
        return ipaddress.ip_address(peer).is_loopback
    except ValueError:
        return False
