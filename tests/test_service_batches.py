"""What the runner service takes from a batch of the event stream that a listing already covered."""

from __future__ import annotations

import trio

from supervisor.base.levels import StreamState
from supervisor.core.config import Settings
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import JobRegistered, NodesListed
from supervisor.core.nodes import QUICK_SILENT_SECONDS, SILENT_SECONDS
from supervisor.core.orders import SetEnvironment
from supervisor.desk.service import RunnerService
from supervisor.nomad import Allocation, Event, EventBatch, Node, NodeEvent, NodeListStub

from .nomad_double import NomadDouble

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 1, 100.0, 256, False, ())


def event(payload: Node | Allocation, kind: str, index: int) -> Event:
    topic = "Node" if isinstance(payload, Node) else "Allocation"
    return Event(topic, kind, payload.id, "", [], index, payload)


async def test_a_covered_batch_still_tells_of_drains_and_agent_restarts(nursery: trio.Nursery) -> None:
    service = RunnerService(NomadDouble(), Settings(), execution_nursery=nursery)
    service.effects.tell(SetEnvironment(ENVIRONMENT))
    runner_id = next(iter(service.pool.runners))
    service.effects.tell(JobRegistered(runner_id, 5))
    service.informer.apply_batch(
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
    service.informer.last_index = 200  # a listing at 200, whose node listing was older than the batches below
    drained = Node(id="n2", status="ready", drain=True, events=[NodeEvent(message="Node registered")])
    restarted = Node(id="n1", status="initializing", events=[NodeEvent(message="Node re-registered")])
    stopped = Allocation(
        id="a1", job_id=runner_id, client_status="complete", create_index=6, modify_index=150
    )
    service.informer.apply_batch(
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


def two_nodes_two_runners(nursery: trio.Nursery) -> tuple[RunnerService, list[str]]:
    """A service following the stream, with two runners placed, one on each node: n2's agent
    reports its runner; n1's does not."""
    service = RunnerService(NomadDouble(), Settings(), execution_nursery=nursery)
    ready = [NodeListStub(id=n, status="ready", scheduling_eligibility="eligible") for n in ("n1", "n2")]
    service.effects.tell(NodesListed(ready, 2))
    service.effects.tell(SetEnvironment(ExecutionEnvironment(10, "python:3.12", 2, 100.0, 256, False, ())))
    runners = list(service.pool.runners)
    for runner_id in runners:
        service.effects.tell(JobRegistered(runner_id, 5))
    service.gate.report(StreamState.UP)
    service.informer.apply_batch(
        EventBatch(
            6,
            [
                event(placed(runners[0], "n1", 6), "PlanResult", 6),
                event(placed(runners[1], "n2", 6), "PlanResult", 6),
            ],
        )
    )
    return service, runners


def placed(runner_id: str, node_id: str, index: int, *, received: bool = False) -> Allocation:
    raw = (
        {"TaskStates": {"runner": {"State": "pending", "Events": [{"Type": "Received"}]}}} if received else {}
    )
    return Allocation(
        id=f"alloc-{runner_id}",
        job_id=runner_id,
        node_id=node_id,
        client_status="pending",
        desired_status="run",
        create_index=6,
        modify_index=index,
        raw=raw,
    )


async def reports_of_n2(service: RunnerService, runner_id: str, seconds: float, index: int) -> int:
    """n2's agent reports its runner's allocation again every second, for ``seconds``."""
    for _ in range(int(seconds)):
        await trio.sleep(1)
        index += 1
        service.informer.apply_batch(
            EventBatch(
                index, [event(placed(runner_id, "n2", index, received=True), "AllocationUpdated", index)]
            )
        )
    return index


async def test_an_agent_silent_while_the_stream_goes_on_is_avoided(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    service, runners = two_nodes_two_runners(nursery)
    index = await reports_of_n2(service, runners[1], QUICK_SILENT_SECONDS - 1, 10)
    service.informer.avoid_silent_agents()
    assert service.pool.nodes.avoided(trio.current_time()) == ()
    await reports_of_n2(service, runners[1], 1, index)
    service.informer.avoid_silent_agents()
    assert service.pool.nodes.avoided(trio.current_time()) == ("n1",), "the stream went on all along"
    assert runners[0] not in service.pool.runners, "replaced: it waited for an agent that is not there"


async def test_a_stalled_stream_counts_for_little_in_an_agent_s_silence(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Silence is timed by the stream's flow: a stall (nothing written, a leader's election say)
    counts for 2 s at most, and the silence before it still counts after it; but the agent's report
    may have failed in it, and is sent again 5 to 10 s later."""
    service, runners = two_nodes_two_runners(nursery)
    index = await reports_of_n2(service, runners[1], 1, 10)  # 1 s of flow since n1's placement
    await trio.sleep(SILENT_SECONDS + 5)
    service.informer.avoid_silent_agents()
    assert service.pool.nodes.avoided(trio.current_time()) == (), "a stall makes no agent silent"
    index = await reports_of_n2(service, runners[1], SILENT_SECONDS - 3, index)  # the stall, then 1 s each
    service.informer.avoid_silent_agents()
    assert service.pool.nodes.avoided(trio.current_time()) == (), "1 s, 2 s for the stall, then 8 s"
    await reports_of_n2(service, runners[1], 1, index)
    service.informer.avoid_silent_agents()
    assert service.pool.nodes.avoided(trio.current_time()) == ("n1",), "its report did not come after it"


async def test_a_stream_lost_and_back_at_once_is_a_pause_too(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Lost and back within 2 s (a leader's restart with a quick election): the agent's report may
    have failed meanwhile too."""
    service, runners = two_nodes_two_runners(nursery)
    index = await reports_of_n2(service, runners[1], 1, 10)
    service.gate.report(StreamState.DOWN)
    await trio.sleep(0.2)
    service.gate.report(StreamState.UP)
    index = await reports_of_n2(service, runners[1], QUICK_SILENT_SECONDS + 1, index)
    service.informer.avoid_silent_agents()
    assert service.pool.nodes.avoided(trio.current_time()) == ()
    await reports_of_n2(service, runners[1], SILENT_SECONDS - QUICK_SILENT_SECONDS, index)
    service.informer.avoid_silent_agents()
    assert service.pool.nodes.avoided(trio.current_time()) == ("n1",)


async def test_an_agent_s_report_in_a_covered_batch_ends_the_wait(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    service, runners = two_nodes_two_runners(nursery)
    service.informer.last_index = 100  # a listing covered what follows
    service.informer.apply_batch(
        EventBatch(50, [event(placed(runners[0], "n1", 50, received=True), "AllocationUpdated", 50)])
    )
    await reports_of_n2(service, runners[1], SILENT_SECONDS + 1, 100)
    service.informer.avoid_silent_agents()
    assert service.pool.nodes.avoided(trio.current_time()) == ()


async def test_no_agent_is_judged_while_the_stream_is_not_up(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    service, runners = two_nodes_two_runners(nursery)
    await reports_of_n2(service, runners[1], SILENT_SECONDS + 1, 10)
    service.gate.report(StreamState.RECOVERING)
    service.informer.avoid_silent_agents()
    assert service.pool.nodes.avoided(trio.current_time()) == ()
