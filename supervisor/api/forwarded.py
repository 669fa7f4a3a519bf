"""Whether a request came over HTTPS, as the connection or a trusted proxy says: the scheme of the
URLs the API hands out (``wss://`` or ``ws://``) follows it.

A proxy that ends TLS says so in ``Forwarded: proto=https`` (RFC 7239) or ``X-Forwarded-Proto:
https``. Either is believed only from a peer in ``[server] forwarded_allow_ips`` (IP addresses,
networks, or "*"), as uvicorn and gunicorn do; anyone else could write it. Of several values, the
last is taken: the one the nearest proxy, the trusted peer itself, added. ``Forwarded`` is read
before ``X-Forwarded-Proto``.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from typing import Final, final

from attrs import frozen
from starlette.types import Scope

__all__ = ["TrustedProxies", "forwarded_proto", "is_secure", "trusted_proxies"]

_SECURE: Final = frozenset({"https", "wss"})
_SCHEMES: Final = frozenset({"http", "https", "ws", "wss"})
# One forwarded-pair (RFC 7239, 4): a token, "=", a token or a quoted string; then ";" or "," or the end.
_PAIR: Final = re.compile(
    r'\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([!#$%&\'*+.^_`|~0-9A-Za-z-]*))\s*([;,]|$)'
)

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@final
@frozen
class TrustedProxies:
    """The peers whose forwarding headers are believed."""

    networks: tuple[_Network, ...] = ()
    everyone: bool = False

    def trust(self, host: str | None) -> bool:
        """Whether ``host`` (a peer's IP address) is one of them."""
        if self.everyone:
            return True
        if not host:
            return False
        try:
            address = ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


@functools.lru_cache(maxsize=8)
def trusted_proxies(entries: tuple[str, ...]) -> TrustedProxies:
    """``forwarded_allow_ips``'s entries as ``TrustedProxies``; ValueError for one that is none of
    an address, a network and "*"."""
    everyone = any(entry.strip() == "*" for entry in entries)
    networks = tuple(
        ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip() != "*"
    )
    return TrustedProxies(networks, everyone)


def _elements(value: str) -> list[dict[str, str]]:
    """The elements of a ``Forwarded`` value, each its pairs by lower-case name; what does not parse
    ends the value there."""
    elements: list[dict[str, str]] = [{}]
    position = 0
    while position < len(value) and (match := _PAIR.match(value, position)):
        name, quoted, token, separator = match.groups()
        text = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else token
        elements[-1][name.lower()] = text
        if separator == ",":
            elements.append({})
        position = match.end()
        if not separator:
            break
    return [element for element in elements if element]


def forwarded_proto(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The scheme the nearest proxy says the client used (lower case), from ``Forwarded`` or else
    ``X-Forwarded-Proto``; None when neither says one of http, https, ws, wss."""
    forwarded: list[str] = []
    x_forwarded: list[str] = []
    for name, value in headers:
        if name.lower() == b"forwarded":
            forwarded.append(value.decode("latin-1"))
        elif name.lower() == b"x-forwarded-proto":
            x_forwarded.extend(part.strip() for part in value.decode("latin-1").split(","))
    elements = _elements(", ".join(forwarded)) if forwarded else []
    if elements and "proto" in elements[-1]:
        proto = elements[-1]["proto"].lower()
        return proto if proto in _SCHEMES else None
    if x_forwarded:
        proto = x_forwarded[-1].lower()
        return proto if proto in _SCHEMES else None
    return None


def is_secure(scope: Scope, trusted: TrustedProxies) -> bool:
    """Whether the request came over TLS: to us, or to a trusted proxy that says so."""
    if scope.get("scheme") in _SECURE:
        return True
    client = scope.get("client")
    if not trusted.trust(client[0] if client else None):
        return False
    return forwarded_proto(scope.get("headers", ())) in _SECURE
