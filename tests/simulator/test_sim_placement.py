"""Placement as Nomad's GenericStack makes it: a few shuffled feasible nodes ranked, the best taken,
by the cluster's scheduler algorithm."""

from __future__ import annotations

from collections import Counter

import pytest

from supervisor.nomad import NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import batch_job, settle

RUNNERS = 40


def runners_per_node(cluster: SimulatedCluster, prefix: str) -> Counter[str]:
    return Counter(
        a.node_id
        for job in cluster.state.allocs_by_job.values()
        for a in job.values()
        if a.job_id.startswith(prefix) and not a.terminal
    )


async def register_runners(cluster: SimulatedCluster, client: NomadClient, prefix: str, count: int) -> None:
    for i in range(count):
        await client.register_job(batch_job(f"{prefix}{i}"))
    await settle(cluster, lambda: sum(runners_per_node(cluster, prefix).values()) == count)


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=5)])
async def test_a_batch_job_ranks_two_nodes_not_every_node(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await register_runners(cluster, client, "old-", 4 * RUNNERS)
    empty = sorted(cluster.state.nodes)[0]
    await client.drain_node(empty, deadline=-1)
    await settle(cluster, lambda: not cluster.state.live_allocs_by_node.get(empty))
    await client.drain_node(empty, deadline=None, mark_eligible=True)

    level = min(runners_per_node(cluster, "old-").values())
    await register_runners(cluster, client, "new-", level)
    placed = runners_per_node(cluster, "new-")
    # Looked at two in five times, the empty node takes about 40% of them; a scan of every node
    # would send every one there.
    assert placed[empty] < level * 3 // 4, placed
    assert placed[empty] > max(n for node, n in placed.items() if node != empty), placed


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=3, scheduler_algorithm="binpack")])
async def test_binpack_piles_runners_onto_the_fuller_node(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    await register_runners(cluster, client, "r-", RUNNERS)
    placed = runners_per_node(cluster, "r-")
    counts = [placed[node] for node in cluster.state.nodes]
    # Once two nodes hold more than the third, the third loses every ranking it is looked at in.
    assert min(counts) <= 1, counts


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=3)])
async def test_spread_keeps_runners_level(cluster: SimulatedCluster, client: NomadClient) -> None:
    await register_runners(cluster, client, "r-", RUNNERS)
    counts = runners_per_node(cluster, "r-").values()
    assert max(counts) - min(counts) <= RUNNERS // 4, counts


def test_an_unknown_scheduler_algorithm_is_refused() -> None:
    with pytest.raises(ValueError, match="scheduler_algorithm"):
        SimConfig(scheduler_algorithm="random")
