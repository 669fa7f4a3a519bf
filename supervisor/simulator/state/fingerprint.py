"""What a Nomad 1.10.5 client fingerprints of its host and registers with its node: attributes, meta,
resources, drivers, and the computed class derived from them.

Every simulated node is the same host (by default 4 cores, 4,000 MHz in all, 8 GiB of memory, 20 GiB
of free disk, one NIC, docker, the CNI reference plugins and one CNI network ``secure-bridge``: a
``HostSize``), told apart by its name and addresses (``unique.`` attributes); so all share one
computed class, as identical hosts do in Nomad. Each CNI network configured on the host is a
``cni/<name>`` entry of ``NodeResources.Networks`` (the ``cni`` fingerprinter), and each reference
plugin a ``plugins.cni.version.<plugin>`` attribute (the ``plugins_cni`` fingerprinter). The
values are the shapes Nomad writes (``client/fingerprint/*``, ``client/client.go``
``setupNode``): maps the client creates empty are ``{}``, the legacy ``Resources`` and
``Reserved`` are zero, and a NUMA topology's distances are base64, as go-msgpack writes a
``[]uint8``.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import orjson
from attrs import field, frozen

__all__ = [
    "CNI_PLUGINS",
    "EMPTY_RESOURCES",
    "NODE_META",
    "RESERVED_RESOURCES",
    "ZERO_RESOURCES",
    "HostSize",
    "computed_class",
    "driver_info",
    "host_attributes",
    "node_resources",
    "sized_attributes",
]

CORES: Final = 4
_MIB: Final = 1024 * 1024
# The volume holding the client's data_dir: what is not free is the system's.
_DISK_USED_BYTES: Final = 10 * 1024 * _MIB
_DOCKER_VERSION: Final = "27.5.1"
# The CNI reference plugins in the client's cni_path, by the version they report.
CNI_PLUGINS: Final = {
    name: "1.6.2"
    for name in (
        "bandwidth",
        "bridge",
        "dhcp",
        "firewall",
        "host-device",
        "host-local",
        "ipvlan",
        "loopback",
        "macvlan",
        "portmap",
        "ptp",
        "sbr",
        "static",
        "tap",
        "tuning",
        "vlan",
        "vrf",
    )
}


def _network_names(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(set(names)))


@frozen
class HostSize:
    """What one simulated host offers: CPU (MHz over its 4 cores), memory and free disk (MiB),
    and the CNI networks configured on it (by name, as ``cni/<name>`` modes)."""

    cpu_mhz: int = 4000
    memory_mb: int = 8192
    disk_mb: int = 20480
    cni_networks: tuple[str, ...] = field(default=("secure-bridge",), converter=_network_names)

    @property
    def core_mhz(self) -> int:
        """One core's speed."""
        return self.cpu_mhz // CORES


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
    "cpu.modelname": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
    "cpu.numcores": str(CORES),
    "cpu.reservablecores": str(CORES),
    "driver.docker": "1",
    "driver.docker.bridge_ip": "172.17.0.1",
    "driver.docker.os_type": "linux",
    "driver.docker.runtimes": "io.containerd.runc.v2,runc",
    "driver.docker.version": _DOCKER_VERSION,
    "driver.exec": "1",
    "kernel.arch": "x86_64",
    "kernel.name": "linux",
    "kernel.version": "6.8.0-1021-aws",
    "nomad.bridge.hairpin_mode": "false",
    "nomad.service_discovery": "true",
    "numa.node.count": "1",
    "numa.node0.cores": f"0-{CORES - 1}",
    "os.cgroups.version": "2",
    "os.name": "ubuntu",
    "os.version": "24.04",
    "unique.cgroup.mountpoint": "/sys/fs/cgroup",
    "unique.cgroup.version": "v2",
    "unique.storage.volume": "/dev/nvme0n1p1",
    **{f"plugins.cni.version.{name}": version for name, version in CNI_PLUGINS.items()},
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


def _topology(size: HostSize) -> dict[str, Any]:
    """One NUMA node at distance 10 from itself: SLIT [][]uint8 is written as base64 rows."""
    return {
        "Cores": [
            {
                "BaseSpeed": size.core_mhz,
                "Disable": False,
                "Grade": True,
                "GuessSpeed": 0,
                "ID": core,
                "MaxSpeed": size.core_mhz,
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


def sized_attributes(size: HostSize) -> dict[str, str]:
    """The attributes that follow the host's size."""
    return {
        "cpu.frequency": str(size.core_mhz),
        "cpu.totalcompute": str(size.cpu_mhz),
        "cpu.usablecompute": str(size.cpu_mhz),
        "memory.totalbytes": str(size.memory_mb * _MIB),
        "unique.storage.bytesfree": str(size.disk_mb * _MIB),
        "unique.storage.bytestotal": str(size.disk_mb * _MIB + _DISK_USED_BYTES),
    }


def host_attributes(name: str, address: str, http_addr: str, size: HostSize) -> dict[str, str]:
    """The attributes the client's fingerprinters report of one simulated host."""
    return {
        **_HOST_ATTRIBUTES,
        **sized_attributes(size),
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


def node_resources(address: str, port_range: tuple[int, int], size: HostSize) -> dict[str, Any]:
    """NodeResources: the legacy ``Cpu`` view beside the ``Processors`` topology, memory, disk, the
    host network and its addresses, the bridge and CNI networks, and the dynamic port range."""
    mac = "02:00:" + ":".join(f"{int(octet):02x}" for octet in address.split("."))
    return {
        "Cpu": {
            "CpuShares": size.cpu_mhz,
            "ReservableCpuCores": list(range(CORES)),
            "TotalCpuCores": CORES,
        },
        "Devices": None,
        "Disk": {"DiskMB": size.disk_mb},
        "MaxDynamicPort": port_range[1],
        "Memory": {"MemoryMB": size.memory_mb},
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
            {"CIDR": f"{address}/32", "Device": "eth0", "IP": address, "MBits": 1000, "Mode": "host"},
            {"Mode": "bridge"},
            *({"Mode": f"cni/{name}"} for name in size.cni_networks),
        ],
        "Processors": {"Topology": _topology(size)},
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
