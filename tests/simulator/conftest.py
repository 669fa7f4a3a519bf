"""Fixtures for the simulated cluster: it runs in the test's own trio run, on the test's clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from supervisor.nomad import NomadClient, NomadSettings, RetryPolicy
from supervisor.simulator import SimConfig, SimulatedCluster


def batch_job(
    job_id: str,
    *,
    count: int = 1,
    restart: dict[str, Any] | None = None,
    reschedule: dict[str, Any] | None = None,
    ports: tuple[int, ...] = (),
    meta: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A runner-like batch job: one group, one task that sleeps forever."""
    group: dict[str, Any] = {
        "Name": "default-group",
        "Count": count,
        "Tasks": [
            {
                "Name": "default-task",
                "Driver": "docker",
                "Config": {"image": "python:3.12-slim", "command": "sleep", "args": ["infinity"]},
                "Resources": {"CPU": 100, "MemoryMB": 50, "MemoryMaxMB": 256},
            }
        ],
    }
    if restart is not None:
        group["RestartPolicy"] = restart
    if reschedule is not None:
        group["ReschedulePolicy"] = reschedule
    if ports:
        group["Networks"] = [{"Mode": "host", "DynamicPorts": [{"Label": str(p), "To": p} for p in ports]}]
    if meta is not None:
        group["Meta"] = meta
    return {"ID": job_id, "Name": job_id, "Type": "batch", "Datacenters": ["dc1"], "TaskGroups": [group]}


async def settle(cluster: SimulatedCluster, condition: Callable[[], bool], *, within: float = 120.0) -> None:
    """Wait (on trio's clock) until ``condition`` holds: checked after every write, and every 0.1 s
    for what changes without one (an agent process stopping)."""
    with trio.fail_after(within):
        while not condition():
            with trio.move_on_after(0.1):
                await cluster.wait_for_write()


def make_client(cluster: SimulatedCluster, **settings: Any) -> NomadClient:
    settings.setdefault("retry", RetryPolicy(attempts=1))
    return NomadClient(NomadSettings(addresses=tuple(cluster.addresses), **settings))


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(seed=7)


@pytest.fixture
async def cluster(nursery: trio.Nursery, sim_config: SimConfig) -> SimulatedCluster:
    started: SimulatedCluster = await nursery.start(SimulatedCluster(sim_config).run)
    return started


@pytest.fixture
async def client(cluster: SimulatedCluster) -> AsyncIterator[NomadClient]:
    async with make_client(cluster) as nomad:
        yield nomad
