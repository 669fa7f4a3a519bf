"""A simulated Nomad cluster, faithful to Nomad's API where the supervisor depends on it, with a
fault-injection API. It serves real HTTP and WebSocket on loopback, so the supervisor's own client
code is what gets tested.
"""

from __future__ import annotations

from .cluster import SimulatedCluster
from .config import SimConfig
from .handle import SimServer

__all__ = ["SimConfig", "SimServer", "SimulatedCluster"]
