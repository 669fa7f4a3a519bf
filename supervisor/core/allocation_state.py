"""What an allocation's state says about its runner: whether it lives, runs, why it ended, and how
long its task waits to restart. Pure functions of one allocation, from an event or a listing."""

from __future__ import annotations

from ..nomad import Allocation, AllocListStub
from .runners import REASON_ALLOCATION_STOPPED, REASON_DRAINED, REASON_NODE_DOWN, REASON_OOM

__all__ = ["end_reason", "is_live", "is_running", "restart_delay", "written_by_its_client"]


def end_reason(alloc: Allocation | AllocListStub) -> str:
    """Why a used runner's allocation ended, as precisely as its state tells."""
    if "migrated" in alloc.desired_description:
        return REASON_DRAINED
    if alloc.client_status == "lost":
        return REASON_NODE_DOWN
    for state in alloc.task_states.values():
        terminated = [e for e in state.events if e.type == "Terminated"]
        if terminated and terminated[-1].details.get("oom_killed") == "true":
            return REASON_OOM
    return REASON_ALLOCATION_STOPPED


def is_live(alloc: Allocation | AllocListStub) -> bool:
    """Neither its agent nor the servers consider the allocation ended."""
    return not alloc.client_terminal and not alloc.server_terminal


def is_running(alloc: Allocation | AllocListStub) -> bool:
    """The allocation lives and its agent reported it running."""
    return is_live(alloc) and alloc.client_status == "running"


def restart_delay(alloc: Allocation | AllocListStub) -> float:
    """Seconds its task waits before it starts again, when its latest event says it restarts (0
    otherwise, or when the allocation comes without its task states, as in a lean listing)."""
    try:
        states = alloc.task_states.values()
    except ValueError:
        return 0.0  # task states Nomad should not have sent: no evidence of a restart's delay
    delays = [s.events[-1].start_delay_ns for s in states if s.events and s.events[-1].type == "Restarting"]
    return max(delays, default=0) / 1e9


def written_by_its_client(alloc: Allocation | AllocListStub) -> bool:
    """The allocation's last change was its client's (a server-side one, such as the in-place
    update a claim writes, bumps ``AllocModifyIndex`` too, and says nothing of the agent)."""
    server_side = getattr(alloc, "alloc_modify_index", None)
    return server_side is not None and alloc.modify_index > server_side
