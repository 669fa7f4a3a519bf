"""The bytes of one connection of the API's HTTP server: the core it shares with the simulated
cluster's server (``base/http_wire.py``), under the names the API's modules import. An HTTP
exchange (``http_exchange.py``), a WebSocket session (``websocket_session.py``) and the
connection's close (``http_connection.py``) all go through it.
"""

from __future__ import annotations

from ..base.http_wire import PEER_ERRORS, HttpServerSettings, HttpWire

__all__ = ["PEER_ERRORS", "HttpServerSettings", "HttpWire"]
