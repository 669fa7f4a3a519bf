"""What the runner service takes from a batch of the event stream that a listing already covered."""

from __future__ import annotations

import trio

from supervisor.config import Settings
from supervisor.environments import ExecutionEnvironment
from supervisor.nomad import Allocation, Event, EventBatch, Node, NodeEvent
from supervisor.service import RunnerService

from .nomad_double import NomadDouble

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 1, 100.0, 256, False, ())


def event(payload: Node | Allocation, kind: str, index: int) -> Event:
    topic = "Node" if isinstance(payload, Node) else "Allocation"
    return Event(topic, kind, payload.id, "", [], index, payload)


async def test_a_covered_batch_still_tells_of_drains_and_agent_restarts(nursery: trio.Nursery) -> None:
    service = RunnerService(NomadDouble(), Settings(), execution_nursery=nursery)
    service.pool.set_environment(ENVIRONMENT)
    runner_id = next(iter(service.pool.runners))
    service.pool.registered(runner_id, 5)
    service.apply_batch(
        EventBatch(
            6,
            [
                event(
                    Allocation(
                        id="a1",
                        job_id=runner_id,
                        client_status="running",
                        create_index=6,
                        modify_index=6,
                        node_id="n1",
                    ),
                    "PlanResult",
                    6,
                )
            ],
        )
    )
    service.last_index = 200  # a listing at 200, whose node listing was older than the batches below
    drained = Node(id="n2", status="ready", drain=True, events=[NodeEvent(message="Node registered")])
    restarted = Node(id="n1", status="initializing", events=[NodeEvent(message="Node re-registered")])
    stopped = Allocation(
        id="a1", job_id=runner_id, client_status="complete", create_index=6, modify_index=150
    )
    service.apply_batch(
        EventBatch(
            150,
            [
                event(drained, "NodeDrain", 150),
                event(restarted, "NodeRegistration", 150),
                event(stopped, "AllocationUpdated", 150),
            ],
        )
    )
    assert service.pool.nodes.draining("n2"), "no listing can be trusted to show a node event"
    assert service.pool.runners[runner_id].suspect_since == 150, "its agent restarted"
    assert service.pool.runners[runner_id].alloc_modify_index == 6, "the listing covered the allocation"
