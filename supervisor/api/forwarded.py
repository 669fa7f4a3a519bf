"""Whether a request came over HTTPS, as the connection or a trusted proxy says: the scheme of the
URLs the API hands out (``wss://`` or ``ws://``) follows it.

A proxy that ends TLS says so in ``Forwarded: proto=https`` (RFC 7239) or ``X-Forwarded-Proto:
https``. Either is believed only from a peer in ``[server] forwarded_allow_ips`` (IP addresses,
networks, or "*"), as uvicorn and gunicorn do; anyone else could write it. Of several values, the
last is taken: the one the nearest proxy, the trusted peer itself, added.

``X-Forwarded-Proto`` is read first, as uvicorn and gunicorn do: it is the header most proxies set
(nginx's recipe overwrites it), while many pass on a ``Forwarded`` the client wrote. ``Forwarded``
is read only when there is no ``X-Forwarded-Proto``, and not at all when any part of it fails to
parse: what follows a broken part may be the element the proxy appended.
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
# Nothing but white space up to a ";", a "," or the end: an empty pair or element, which RFC 7239
# and RFC 9110 (5.6.1) allow.
_EMPTY: Final = re.compile(r"\s*([;,]|$)")

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


def _elements(value: str) -> list[dict[str, str]] | None:
    """The elements of a ``Forwarded`` value, each its pairs by lower-case name; None when any part
    of it does not parse, or names a parameter twice in one element. Empty pairs and elements are skipped."""
    elements: list[dict[str, str]] = [{}]
    position = 0
    while position < len(value):
        if empty := _EMPTY.match(value, position):
            if empty.group(1) == ",":
                elements.append({})
            position = empty.end()
            continue
        match = _PAIR.match(value, position)
        if match is None:
            return None
        name, quoted, token, separator = match.groups()
        name = name.lower()
        if name in elements[-1]:
            return None
        elements[-1][name] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else token
        if separator == ",":
            elements.append({})
        position = match.end()
    return [element for element in elements if element]


def _scheme(text: str) -> str | None:
    proto = text.strip().lower()
    return proto if proto in _SCHEMES else None


def forwarded_proto(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The scheme the nearest proxy says the client used (lower case), from ``X-Forwarded-Proto``
    or, when there is none, ``Forwarded``; None when the header read says none of http, https, ws,
    wss, or ``Forwarded`` does not parse."""
    forwarded: list[str] = []
    x_forwarded: list[str] = []
    for name, value in headers:
        if name.lower() == b"forwarded":
            forwarded.append(value.decode("latin-1"))
        elif name.lower() == b"x-forwarded-proto":
            x_forwarded.extend(value.decode("latin-1").split(","))
    if x_forwarded:
        return _scheme(x_forwarded[-1])
    elements = _elements(", ".join(forwarded)) if forwarded else None
    if elements and "proto" in elements[-1]:
        return _scheme(elements[-1]["proto"])
    return None


def is_secure(scope: Scope, trusted: TrustedProxies) -> bool:
    """Whether the request came over TLS: to us, or to a trusted proxy that says so."""
    if scope.get("scheme") in _SECURE:
        return True
    client = scope.get("client")
    if not trusted.trust(client[0] if client else None):
        return False
    return forwarded_proto(scope.get("headers", ())) in _SECURE
