"""The cluster-wide routes of one simulated server: raft peers, regions, namespaces, the agent's own
description, forced garbage collection and node purge (``command/agent/status_endpoint.go``,
``region_endpoint.go``, ``namespace_endpoint.go``, ``agent_endpoint.go``, ``system_endpoint.go``,
``node_endpoint.go``).

- ``GET /v1/status/peers``: every server's RPC address; ``GET /v1/regions``: the one region. Both
  are forwarded to the leader, so without one they fail as Nomad's do.
- ``GET /v1/namespaces`` (``prefix``) and ``GET /v1/namespace/:name`` (404 ``Namespace not
  found``): Nomad's ``default`` namespace as its state store creates it at index 1, and, since the
  simulator takes jobs and variables in any namespace, one alike for each other namespace in use.
- ``GET /v1/agent/self``: the server agent's ``config`` (the parts a client reads: region,
  datacenter, name, version, ports), its serf ``member`` and its ``stats``.
- ``PUT /v1/system/gc``: Nomad's forced GC: dead jobs, terminal allocations and evaluations,
  however recent (down nodes are not collected); an empty 200.
- ``PUT|POST /v1/node/:id/purge``: see ``node_purge.py``.
- ``GET /v1/operator/scheduler/configuration``: the scheduler's algorithm and memory
  oversubscription, as ``SimConfig`` sets them.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any, Final

from ..handle import ClusterHandle, SimServer
from ..http.server import Request, Response, json_response
from .node_purge import NodePurge
from .server_helpers import ServerHelpers

__all__ = ["AgentRoutes"]

_DEFAULT_NAMESPACE: Final = "default"
_SERF_PORT: Final = 4648
# The namespaces and the scheduler's configuration are written once, at the state store's start.
_NAMESPACES_INDEX: Final = 1


def _namespace(name: str) -> dict[str, Any]:
    """A Namespace as the state store holds it: its Hash is Blake2b-256 of the fields set."""
    description = "Default shared namespace" if name == _DEFAULT_NAMESPACE else ""
    digest = hashlib.blake2b((name + description).encode(), digest_size=32).digest()
    return {
        "Capabilities": None,
        "ConsulConfiguration": None,
        "CreateIndex": _NAMESPACES_INDEX,
        "Description": description,
        "Hash": base64.b64encode(digest).decode(),
        "Meta": None,
        "ModifyIndex": _NAMESPACES_INDEX,
        "Name": name,
        "NodePoolConfiguration": None,
        "Quota": "",
        "VaultConfiguration": None,
    }


class AgentRoutes:
    """Raft peers, regions, namespaces, the agent's self, GC and node purge."""

    def __init__(self, cluster: ClusterHandle, server: SimServer, helpers: ServerHelpers) -> None:
        self.cluster = cluster
        self.server = server
        self.state = cluster.state
        self.config = cluster.config
        self.helpers = helpers
        self.purges = NodePurge(cluster)

    def add_routes(self, add: Callable[[str, str, Any], None]) -> None:
        """Add the routes to a server's router."""
        add("/v1/status/peers", "GET", self.peers)
        add("/v1/regions", "GET", self.regions)
        add("/v1/namespaces", "GET", self.namespaces)
        add("/v1/namespace/{name}", "GET", self.namespace)
        add("/v1/agent/self", "GET", self.agent_self)
        add("/v1/system/gc", "PUT", self.garbage_collect)
        add("/v1/node/{node_id}/purge", "PUT POST", self.purge_node)
        add("/v1/operator/scheduler/configuration", "GET", self.scheduler_configuration)

    async def peers(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/status/peers``: the raft configuration's servers, up or not."""
        self.helpers.require_leader(request)
        return json_response([server.rpc_address for server in self._servers()])

    async def regions(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/regions``."""
        self.helpers.require_leader(request)
        return json_response([self.config.region])

    def _namespaces(self) -> list[str]:
        used = {key[0] for key in self.state.jobs} | {key[0] for key in self.state.variables}
        return sorted(used | {_DEFAULT_NAMESPACE})

    async def namespaces(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/namespaces``: a blocking query on the namespaces table."""
        options, index = await self.helpers.read(request, lambda: _NAMESPACES_INDEX)
        names = [n for n in self._namespaces() if n.startswith(options.prefix)]
        return json_response([_namespace(n) for n in names], headers=self.helpers.headers(index))

    async def namespace(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/namespace/:name``."""
        _, index = await self.helpers.read(request, lambda: _NAMESPACES_INDEX)
        if params["name"] not in self._namespaces():
            raise self.helpers.not_found("Namespace not found", index)
        return json_response(_namespace(params["name"]), headers=self.helpers.headers(index))

    async def agent_self(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/agent/self``: answered by the agent itself, leader or not."""
        return json_response(self._self())

    async def scheduler_configuration(self, request: Request, params: dict[str, str]) -> Response:
        """``GET /v1/operator/scheduler/configuration``: the operator's settings, as the state store
        holds them since its start (``structs.SchedulerConfiguration``)."""
        self.helpers.require_leader(request)
        config = self.cluster.config
        body = {
            "SchedulerConfig": {
                "SchedulerAlgorithm": config.scheduler_algorithm,
                "PreemptionConfig": {
                    "SystemSchedulerEnabled": True,
                    "SysBatchSchedulerEnabled": False,
                    "BatchSchedulerEnabled": False,
                    "ServiceSchedulerEnabled": False,
                },
                "MemoryOversubscriptionEnabled": config.memory_oversubscription,
                "RejectJobRegistration": False,
                "PauseEvalBroker": False,
                "CreateIndex": _NAMESPACES_INDEX,
                "ModifyIndex": _NAMESPACES_INDEX,
            },
            "Index": _NAMESPACES_INDEX,
            "LastContact": 0,
            "KnownLeader": True,
            "NextToken": "",
        }
        return json_response(body, headers=self.helpers.headers(_NAMESPACES_INDEX))

    async def garbage_collect(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT /v1/system/gc``."""
        self.helpers.require_leader(request)
        self.state.collect_garbage(force=True)
        return Response(200, b"")

    async def purge_node(self, request: Request, params: dict[str, str]) -> Response:
        """``PUT|POST /v1/node/:id/purge``."""
        self.helpers.require_leader(request)
        result = self.purges.purge(params["node_id"])
        return json_response(result, headers=(("X-Nomad-Index", str(result["Index"])),))

    def _servers(self) -> list[SimServer]:
        return [server for i in range(self.config.servers) if (server := self._server(i))]

    def _server(self, i: int) -> SimServer | None:
        return self.cluster.server(f"server-{i + 1}")

    def _self(self) -> dict[str, Any]:
        config, server = self.cluster.config, self.server
        leader = self.cluster.server(self.cluster.leader or "")
        rpc_port = server.rpc_address.rpartition(":")[2]
        version = {
            "BuildDate": "0001-01-01T00:00:00Z",
            "Revision": "",
            "Version": config.nomad_version,
            "VersionMetadata": "",
            "VersionPrerelease": "",
        }
        return {
            "config": {
                "ACL": {"Enabled": config.acl_enabled},
                "Addresses": {"HTTP": server.host, "RPC": server.host, "Serf": server.host},
                "AdvertiseAddrs": {
                    "HTTP": f"{server.host}:{server.port}",
                    "RPC": server.rpc_address,
                    "Serf": f"{server.host}:{_SERF_PORT}",
                },
                "BindAddr": server.host,
                "Client": {"Enabled": False},
                "Datacenter": config.datacenter,
                "LogLevel": "INFO",
                "NodeName": server.name,
                "Ports": {"HTTP": server.port, "RPC": int(rpc_port), "Serf": _SERF_PORT},
                "Region": config.region,
                "Server": {"BootstrapExpect": config.servers, "Enabled": True},
                "Version": version,
            },
            "member": {
                "Addr": server.host,
                "DelegateCur": 4,
                "DelegateMax": 5,
                "DelegateMin": 2,
                "Name": f"{server.name}.{config.region}",
                "Port": _SERF_PORT,
                "ProtocolCur": 2,
                "ProtocolMax": 5,
                "ProtocolMin": 1,
                "Status": "alive",
                "Tags": {
                    "build": config.nomad_version,
                    "dc": config.datacenter,
                    "expect": str(config.servers),
                    "port": rpc_port,
                    "raft_vsn": "3",
                    "region": config.region,
                    "role": "nomad",
                    "rpc_addr": server.host,
                    "vsn": "1",
                },
            },
            "stats": {
                "nomad": {
                    "bootstrap": "false",
                    "known_regions": "1",
                    "leader": "true" if leader is server else "false",
                    "leader_addr": leader.rpc_address if leader else "",
                    "server": "true",
                },
                "raft": {
                    "num_peers": str(config.servers - 1),
                    "state": "Leader" if leader is server else "Follower",
                },
            },
        }
