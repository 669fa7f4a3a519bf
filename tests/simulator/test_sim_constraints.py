"""Job constraints in the simulated scheduler: placements, in-place updates and registration, as
Nomad's feasibility checker and job validation treat them."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.base.errors import NomadRequestError
from supervisor.nomad import NomadClient
from supervisor.simulator import SimulatedCluster

from .conftest import batch_job, settle

KERNEL = "${attr.kernel.name}"


def on_node(node_id: str, operand: str) -> dict[str, Any]:
    return {"LTarget": "${node.unique.id}", "RTarget": node_id, "Operand": operand}


def placed_on(cluster: SimulatedCluster, job_id: str) -> set[str]:
    allocs = cluster.state.allocs_by_job.get(("default", job_id), {}).values()
    return {a.node_id for a in allocs if not a.terminal}


def live(cluster: SimulatedCluster, job_id: str) -> list[Any]:
    return [a for a in cluster.state.allocs_by_job.get(("default", job_id), {}).values() if not a.terminal]


async def test_a_job_is_never_placed_on_a_node_its_constraint_excludes(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    avoided = sorted(cluster.state.nodes)[0]
    job = batch_job("avoiding", count=12)
    job["Constraints"] = [on_node(avoided, "!=")]
    await client.register_job(job)
    await settle(cluster, lambda: len(live(cluster, "avoiding")) == 12)
    nodes = placed_on(cluster, "avoiding")
    assert avoided not in nodes
    assert len(nodes) == len(cluster.state.nodes) - 1, "spread over every other node"


async def test_a_group_constraint_can_pin_a_job_to_one_node(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    chosen = sorted(cluster.state.nodes)[-1]
    job = batch_job("pinned", count=4)
    job["TaskGroups"][0]["Constraints"] = [on_node(chosen, "=")]
    await client.register_job(job)
    await settle(cluster, lambda: len(live(cluster, "pinned")) == 4)
    assert placed_on(cluster, "pinned") == {chosen}


async def test_no_node_meets_the_constraints_so_the_evaluation_blocks(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    job = batch_job("nowhere")
    job["Constraints"] = [on_node("no-such-node", "=")]
    registered = await client.register_job(job)
    evaluation = cluster.state.evals[registered.eval_id]
    await settle(cluster, lambda: evaluation.status == "complete")
    assert evaluation.blocked_eval, "the unplaced allocation waits in a blocked evaluation"
    assert "default-group" in evaluation.failed_tg_allocs
    assert not live(cluster, "nowhere")


async def test_an_update_that_drops_a_constraint_stays_in_place_and_one_its_node_fails_moves_it(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    avoided, *_ = sorted(cluster.state.nodes)
    job = batch_job("claimed")
    job["Constraints"] = [on_node(avoided, "!=")]
    await client.register_job(job)
    await settle(cluster, lambda: len(live(cluster, "claimed")) == 1)
    (first,) = live(cluster, "claimed")

    await client.register_job(batch_job("claimed"))
    await settle(cluster, lambda: live(cluster, "claimed")[0].job_version == 1)
    assert [a.id for a in live(cluster, "claimed")] == [first.id], "dropping a constraint: in place"

    moved = batch_job("claimed")
    moved["Constraints"] = [on_node(first.node_id, "!=")]
    await client.register_job(moved)
    await settle(cluster, lambda: first.id not in {a.id for a in live(cluster, "claimed")})
    assert len(live(cluster, "claimed")) == 1, "replaced"
    assert first.node_id not in placed_on(cluster, "claimed"), "its node fails the new constraint"


@pytest.mark.parametrize(
    ("constraints", "status", "message"),
    [
        (
            [{"LTarget": "${attr.kernel.name}", "Operand": "regexp"}],
            500,
            'Constraint operand "regexp" is not simulated',
        ),
        ([{"LTarget": "${attr.kernel.name}", "Operand": "~="}], 500, 'Unknown constraint type "~="'),
        ([{"LTarget": "${attr.kernel.name}", "RTarget": "linux"}], 500, "Missing constraint operand"),
        (
            [{"LTarget": "${node.class}", "Operand": "="}],
            500,
            r'Constraint target "\$\{node.class\}" is not simulated',
        ),
        # Go's decoder refuses these before any check: 400 with encoding/json's text.
        (
            [5],
            400,
            "json: cannot unmarshal number into Go struct field Task.Job.TaskGroups.Tasks.Constraints "
            "of type api.Constraint",
        ),
        (
            5,
            400,
            r"json: cannot unmarshal number into Go struct field Task.Job.TaskGroups.Tasks.Constraints "
            r"of type \[\]\*api.Constraint",
        ),
    ],
)
async def test_a_constraint_the_simulator_cannot_check_is_refused_at_registration(
    client: NomadClient, constraints: Any, status: int, message: str
) -> None:
    job = batch_job("refused")
    job["TaskGroups"][0]["Tasks"][0]["Constraints"] = constraints
    with pytest.raises(NomadRequestError, match=message) as caught:
        await client.register_job(job)
    assert caught.value.status_code == status
