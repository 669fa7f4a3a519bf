"""A cluster's history: terminal allocations of runner jobs purged long ago.

Nomad keeps a terminal allocation after its job is purged until the allocation GC collects it (an
hour by default, a day for batch evaluations), so a busy cluster answers ``GET /v1/allocations``
with thousands of them. A simulated cluster started with ``history_allocations`` holds that many
from the start, each as a purged runner's allocation looks (stopped with its job, its task killed),
so that a listing which reads them all costs what it would cost against Nomad.
"""

from __future__ import annotations

from ..state.encode import ZERO_TIME, rfc3339
from ..state.objects import SimAlloc
from ..state.store import ClusterState
from .task_events import task_event

__all__ = ["add_history"]

_TASK = "default-task"
_GROUP = "default-group"


def add_history(state: ClusterState, count: int) -> None:
    """Add ``count`` terminal allocations of purged runner jobs, spread over the nodes, silently
    (they predate the event buffer)."""
    nodes = sorted(state.nodes.values(), key=lambda n: n.name)
    if not nodes or count <= 0:
        return
    now_ns = state.now_ns()
    for i in range(count):
        node = nodes[i % len(nodes)]
        job_id = f"{i % 20}-{state.new_id()}"
        state.index += 1
        started, stopped = now_ns - 3_600_000_000_000, now_ns - 60_000_000_000
        alloc = SimAlloc(
            id=state.new_id(),
            namespace="default",
            eval_id=state.new_id(),
            name=f"{job_id}.{_GROUP}[0]",
            node_id=node.id,
            node_name=node.name,
            job_id=job_id,
            job={"ID": job_id, "Name": job_id, "Type": "batch", "Namespace": "default"},
            job_version=1,
            task_group=_GROUP,
            tasks=[_TASK],
            host_ip=node.address,
            desired_status="stop",
            desired_description="alloc not needed due to job update",
            client_status="complete",
            client_description="All tasks have completed",
            create_index=state.index,
            modify_index=state.index,
            alloc_modify_index=state.index,
            create_time=started,
            modify_time=stopped,
            terminal_since=state.now() or 1e-9,
        )
        alloc.task_states = {
            _TASK: {
                "Events": [
                    task_event("Received", "Task received by client", started),
                    task_event("Task Setup", "Building Task Directory", started),
                    task_event("Started", "Task started by client", started),
                    task_event(
                        "Killing",
                        "Sent interrupt. Waiting 5s before force killing",
                        stopped,
                        KillTimeout=5_000_000_000,
                    ),
                    task_event("Terminated", "Exit Code: 137, Signal: 9", stopped, ExitCode=137, Signal=9),
                    task_event("Killed", "Task successfully killed", stopped),
                ],
                "Failed": False,
                "FinishedAt": rfc3339(stopped),
                "LastRestart": ZERO_TIME,
                "Paused": "",
                "Restarts": 0,
                "StartedAt": rfc3339(started),
                "State": "dead",
            }
        }
        state.allocs[alloc.id] = alloc
        state.allocs_by_job.setdefault((alloc.namespace, job_id), {})[alloc.id] = alloc
    state.table_index["allocs"] = state.index
