"""The API keeps an idle connection open longer than its clients do."""

from __future__ import annotations

import httpx

from supervisor.core.config import Settings
from supervisor.tree.api_serving import api_server_settings


def test_the_api_outlasts_a_clients_idle_connection() -> None:
    """At equal timeouts a client may send on a connection the server is closing, and a POST (a
    claim, an execution) cannot be sent again: the server must be the one that waits longer."""
    client_expiry = httpx.Limits().keepalive_expiry
    assert client_expiry is not None
    server = api_server_settings(Settings())
    assert server.keep_alive_timeout > 10 * client_expiry
