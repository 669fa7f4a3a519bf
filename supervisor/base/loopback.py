"""Whether a host name or address is this machine's loopback: where the embedded simulated cluster,
whose exec runs local processes, may serve."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """``localhost``, or a loopback address (127.0.0.0/8, ::1); a bracketed IPv6 address too."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
