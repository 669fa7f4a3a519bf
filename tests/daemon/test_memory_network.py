"""The whole system in one trio run with no socket: the daemon and the simulated cluster given one
``MemoryNetwork``, a client speaking to the daemon through it. A claim and an execution go end to
end while every way of opening a socket raises.

Real clock: the simulated agents' exec runs real processes (over pipes, not sockets).
"""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest
import trio
import trio_websocket

from supervisor.base.network import MemoryNetwork
from supervisor.core.config import ServerSettings, Settings
from supervisor.nomad.transport import network_transport
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

from .conftest import ENVIRONMENT


class _NoSocket(socket.socket):
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a socket was opened")


@pytest.fixture
async def no_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside the test's trio run (whose own wake-up socket is made before), every socket created
    from now on fails the test."""
    monkeypatch.setattr(socket, "socket", _NoSocket)
    monkeypatch.setattr(trio.socket, "socket", _NoSocket)


async def test_a_claim_and_an_execution_end_to_end_without_a_socket(
    nursery: trio.Nursery, sim_config: SimConfig, no_socket: None
) -> None:
    network = MemoryNetwork()
    cluster = await nursery.start(SimulatedCluster(sim_config, network=network).run)
    daemon = Daemon(
        Settings(server=ServerSettings(port=0)),
        environ={"NOMAD_ADDR": ",".join(cluster.addresses)},
        network=network,
    )
    await nursery.start(daemon.run)
    api = daemon.addresses[0] + "/api/v1"
    async with httpx.AsyncClient(base_url=api, transport=network_transport(network), timeout=10) as http:
        assert (await http.put("/execution-environments/10", json=ENVIRONMENT)).status_code == 201
        pool = await http.get("/statistics/execution-environments")
        with trio.fail_after(10):
            while not pool.json()["10"]["idleRunners"]:  # a client polls as clients do
                await trio.sleep(0.05)
                pool = await http.get("/statistics/execution-environments")
        claim = await http.post("/runners", json={"executionEnvironmentId": 10, "inactivityTimeout": 60})
        assert claim.status_code == 200, claim.text
        runner = claim.json()["runnerId"]
        execute = await http.post(f"/runners/{runner}/execute", json={"command": "echo over memory"})
        url = urlsplit(execute.json()["websocketUrl"])
        assert url.hostname is not None
        assert url.port is not None
        stream = await network.connect(url.hostname, url.port)
        messages = []
        async with trio.open_nursery() as reading:
            ws = await trio_websocket.wrap_client_stream(
                reading,
                stream,  # type: ignore[arg-type]  # typed narrower than it is: any trio stream
                url.hostname,
                f"{url.path}?{url.query}",
            )
            with pytest.raises(trio_websocket.ConnectionClosed):
                while True:
                    messages.append(json.loads(await ws.get_message()))
        assert messages == [
            {"type": "start"},
            {"type": "stdout", "data": "over memory\r\n"},  # on its terminal
            {"type": "exit", "data": 0},
        ]
        assert (await http.delete(f"/runners/{runner}")).status_code == 204
    assert network.connections > 3, "the daemon, the cluster and the client all went through it"
    daemon.stop()
    with trio.fail_after(10):
        await daemon.ended.wait()
