"""What the event-stream reader and the exec client need of a connection to Nomad, and no more.

``NomadClient`` provides it; the stream and exec modules are typed against this protocol, so that
they sit below the client that uses them.
"""

from __future__ import annotations

import ssl
from typing import Any, Protocol

import httpx

from ..base.network import Network
from .settings import NomadSettings

__all__ = ["NomadConnection"]


class NomadConnection(Protocol):
    """The parts of a Nomad client that the stream reader and the exec client use."""

    @property
    def settings(self) -> NomadSettings:
        """The connection's settings (token, timeouts)."""

    @property
    def address(self) -> str:
        """The server the next request goes to."""
        ...

    @property
    def network(self) -> Network:
        """Where connections are opened (the exec WebSockets')."""

    @property
    def http(self) -> httpx.AsyncClient:
        """The shared httpx client."""

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for WebSockets, or None without TLS."""

    def common_params(self, *, namespaced: bool = True) -> dict[str, str]:
        """The query parameters every request carries."""

    def request_extensions(self) -> dict[str, Any]:
        """httpx extensions for every request."""
