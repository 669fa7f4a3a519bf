"""What a Nomad 1.10.5 client fingerprints of its host and registers with its node: attributes, meta,
resources, drivers, and the computed class derived from them.

Every simulated node is the same host (4 cores at 2400 MHz, 16000 MiB, one NIC, docker), told apart
by its name and addresses (``unique.`` attributes); so all share one computed class, as identical
hosts do in Nomad. The values are the shapes Nomad writes (``client/fingerprint/*``,
``client/client.go`` ``setupNode``): maps the client creates empty are ``{}``, the legacy
``Resources`` and ``Reserved`` are zero, and a NUMA topology's distances are base64, as go-msgpack
writes a ``[]uint8``.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import orjson

__all__ = [
    "CPU_COMPUTE_MHZ",
    "EMPTY_RESOURCES",
    "MEMORY_MB",
    "NODE_META",
    "RESERVED_RESOURCES",
    "ZERO_RESOURCES",
    "computed_class",
    "driver_info",
    "host_attributes",
    "node_resources",
]

CORES: Final = 4
CORE_MHZ: Final = 2400
CPU_COMPUTE_MHZ: Final = CORES * CORE_MHZ
MEMORY_MB: Final = 16_000
DISK_FREE_BYTES: Final = 80_000_000_000
DISK_TOTAL_BYTES: Final = 107_374_182_400
_DOCKER_VERSION: Final = "27.5.1"

# The defaults a client adds to its node's meta (helper/envoy).
NODE_META: Final = {
    "connect.gateway_image": "docker.io/envoyproxy/envoy:v${NOMAD_envoy_version}",
    "connect.log_level": "info",
    "connect.proxy_concurrency": "1",
    "connect.sidecar_image": "docker.io/envoyproxy/envoy:v${NOMAD_envoy_version}",
    "connect.transparent_proxy.default_outbound_port": "15001",
    "connect.transparent_proxy.default_uid": "101",
}
_HOST_ATTRIBUTES: Final = {
    "cpu.arch": "amd64",
    "cpu.frequency": str(CORE_MHZ),
    "cpu.modelname": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
    "cpu.numcores": str(CORES),
    "cpu.reservablecores": str(CORES),
    "cpu.totalcompute": str(CPU_COMPUTE_MHZ),
    "cpu.usablecompute": str(CPU_COMPUTE_MHZ),
    "driver.docker": "1",
    "driver.docker.bridge_ip": "172.17.0.1",
    "driver.docker.os_type": "linux",
    "driver.docker.runtimes": "io.containerd.runc.v2,runc",
    "driver.docker.version": _DOCKER_VERSION,
    "driver.exec": "1",
    "kernel.arch": "x86_64",
    "kernel.name": "linux",
    "kernel.version": "6.8.0-1021-aws",
    "memory.totalbytes": str(MEMORY_MB * 1024 * 1024),
    "nomad.bridge.hairpin_mode": "false",
    "nomad.service_discovery": "true",
    "numa.node.count": "1",
    "numa.node0.cores": f"0-{CORES - 1}",
    "os.cgroups.version": "2",
    "os.name": "ubuntu",
    "os.version": "24.04",
    "unique.cgroup.mountpoint": "/sys/fs/cgroup",
    "unique.cgroup.version": "v2",
    "unique.storage.bytesfree": str(DISK_FREE_BYTES),
    "unique.storage.bytestotal": str(DISK_TOTAL_BYTES),
    "unique.storage.volume": "/dev/nvme0n1p1",
}
# A Resources struct with every field zero (the node's legacy views, a task's exhausted resources).
EMPTY_RESOURCES: Final = {
    "CPU": 0,
    "Cores": 0,
    "Devices": None,
    "DiskMB": 0,
    "IOPS": 0,
    "MemoryMB": 0,
    "MemoryMaxMB": 0,
    "NUMA": None,
    "Networks": None,
    "SecretsMB": 0,
}
# Nothing reserved: the client's ``reserved`` block unset.
RESERVED_RESOURCES: Final = orjson.Fragment(
    orjson.dumps(
        {
            "Cpu": {"CpuShares": 0, "ReservedCpuCores": None},
            "Disk": {"DiskMB": 0},
            "Memory": {"MemoryMB": 0},
            "Networks": {"ReservedHostPorts": ""},
        }
    )
)
ZERO_RESOURCES: Final = orjson.Fragment(orjson.dumps(EMPTY_RESOURCES))
# One NUMA node at distance 10 from itself: SLIT [][]uint8 is written as base64 rows.
_TOPOLOGY: Final = {
    "Cores": [
        {
            "BaseSpeed": CORE_MHZ,
            "Disable": False,
            "Grade": True,
            "GuessSpeed": 0,
            "ID": core,
            "MaxSpeed": CORE_MHZ,
            "NodeID": 0,
            "SocketID": 0,
        }
        for core in range(CORES)
    ],
    "Distances": ["Cg=="],
    "Nodes": [0],
    "OverrideTotalCompute": 0,
    "OverrideWitholdCompute": 0,
}


def host_attributes(name: str, address: str, http_addr: str) -> dict[str, str]:
    """The attributes the client's fingerprinters report of one simulated host."""
    return {
        **_HOST_ATTRIBUTES,
        "unique.advertise.address": http_addr,
        "unique.hostname": name,
        "unique.network.ip-address": address,
    }


def computed_class(datacenter: str, attributes: dict[str, str], meta: dict[str, str]) -> str:
    """Nomad's ComputedClass: a hash of what placement can tell apart (datacenter, node class and
    pool, attributes and meta but their ``unique.`` keys); equal hosts share it."""
    shared = {
        "Attributes": {k: v for k, v in attributes.items() if not k.startswith("unique.")},
        "Datacenter": datacenter,
        "Meta": {k: v for k, v in meta.items() if not k.startswith("unique.")},
        "NodeClass": "",
        "NodePool": "default",
    }
    digest = hashlib.blake2b(orjson.dumps(shared, option=orjson.OPT_SORT_KEYS), digest_size=8).digest()
    return f"v1:{int.from_bytes(digest, 'big')}"


def node_resources(address: str, port_range: tuple[int, int]) -> dict[str, Any]:
    """NodeResources: the legacy ``Cpu`` view beside the ``Processors`` topology, memory, disk, the
    host network and its addresses, and the dynamic port range."""
    mac = "02:00:" + ":".join(f"{int(octet):02x}" for octet in address.split("."))
    return {
        "Cpu": {
            "CpuShares": CPU_COMPUTE_MHZ,
            "ReservableCpuCores": list(range(CORES)),
            "TotalCpuCores": CORES,
        },
        "Devices": None,
        "Disk": {"DiskMB": DISK_FREE_BYTES // (1024 * 1024)},
        "MaxDynamicPort": port_range[1],
        "Memory": {"MemoryMB": MEMORY_MB},
        "MinDynamicPort": port_range[0],
        "NodeNetworks": [
            {
                "Addresses": [
                    {
                        "Address": address,
                        "Alias": "default",
                        "Family": "ipv4",
                        "Gateway": "",
                        "ReservedPorts": "",
                    }
                ],
                "Device": "eth0",
                "MacAddress": mac,
                "Mode": "host",
                "Speed": 1000,
            },
            {"Addresses": None, "Device": "", "MacAddress": "", "Mode": "bridge", "Speed": 0},
        ],
        # NetworkResource is omitempty: its zero fields are left out.
        "Networks": [
            {"CIDR": f"{address}/32", "Device": "eth0", "IP": address, "MBits": 1000, "Mode": "host"}
        ],
        "Processors": {"Topology": _TOPOLOGY},
    }


def driver_info(update_time: str) -> dict[str, Any]:
    """The node's Drivers: docker and exec healthy, raw_exec disabled (its default)."""
    docker = {k: v for k, v in _HOST_ATTRIBUTES.items() if k.startswith("driver.docker")}
    return {
        "docker": {
            "Attributes": {**docker, "driver.docker": "true"},
            "Detected": True,
            "HealthDescription": "Healthy",
            "Healthy": True,
            "UpdateTime": update_time,
        },
        "exec": {
            "Attributes": {"driver.exec": "true"},
            "Detected": True,
            "HealthDescription": "Healthy",
            "Healthy": True,
            "UpdateTime": update_time,
        },
        "raw_exec": {
            "Attributes": None,
            "Detected": False,
            "HealthDescription": "disabled",
            "Healthy": False,
            "UpdateTime": update_time,
        },
    }
