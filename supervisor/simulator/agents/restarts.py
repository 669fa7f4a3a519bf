"""Agent restarts, and what an agent finds when it comes back: the faults the field saw.

An agent restarted alone keeps its running tasks: the restored client reattaches to their containers
and writes nothing about them. A container that is gone (its host rebooted) cannot be reattached:
Nomad's task runner records "Failed Restoring Task" and runs the task again in a new container once
the client has contacted the servers (``TaskRunner.Restore``, ``waitOnServers``). Until it writes
that, the servers still list the allocation running while an exec into it answers that the task is
not running: the window in which only evidence newer than the restart tells a live runner from a
dead one. Every agent restarting at once adds the field's failure mode (hashicorp/nomad#23937 as the
field reported it): some runner jobs vanish without an event.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final, Protocol

from ..config import SimConfig
from ..scheduling.scheduler import Scheduler
from ..state.objects import TASK_EVENT_LIMIT, SimAlloc, SimNode
from ..state.store import ClusterState
from .exec_hooks import ExecHooks
from .task_events import task_event

__all__ = ["RESTORE_FAILED", "AgentRestarts"]


class Agents(Protocol):
    """What restarts need of the agents (``agents.Agents``)."""

    state: ClusterState
    config: SimConfig
    scheduler: Scheduler
    exec: ExecHooks

    def stop_agent(self, node: SimNode) -> None: ...

    def start_agent(
        self,
        node: SimNode,
        *,
        recreate_containers: bool = ...,
        lose_containers: float = ...,
        report_delay: float = ...,
    ) -> None: ...

    def drain(
        self,
        node: SimNode,
        *,
        deadline_ns: int | None,
        mark_eligible: bool,
        meta: dict[str, str],
        accessor: str,
    ) -> None: ...

    def finish_tasks(
        self, alloc: SimAlloc, kind: str, display: str, *, killing: bool = ..., **fields: Any
    ) -> None: ...

    def restarted(self, alloc_id: str, *, counted: bool = ...) -> None: ...


_SELF_DRAIN_POLL: Final = 1.0
RESTORE_FAILED: Final = "failed to restore task; will not run until server is contacted"


class AgentRestarts:
    """The agents' restarts, and what each finds when it comes back."""

    def __init__(self, agents: Agents) -> None:
        self._agents = agents
        self.state = agents.state

    # -- restarts -------------------------------------------------------------------------------

    def restart_agent(
        self,
        node: SimNode,
        *,
        downtime: float,
        drain_on_shutdown: bool = False,
        drain_deadline: float = 3600.0,
        recreate_containers: bool = False,
        lose_containers: float = 0.0,
        report_delay: float = 1.0,
    ) -> None:
        """Restart the node's agent: it stops (after draining itself, if asked), and starts again
        after ``downtime``, finding ``lose_containers`` of its running tasks' containers gone (it
        writes so ``report_delay`` seconds after its return)."""

        def shut_down() -> None:
            self._agents.stop_agent(node)
            self.state.call_later(
                downtime,
                lambda: self._agents.start_agent(
                    node,
                    recreate_containers=recreate_containers,
                    lose_containers=lose_containers,
                    report_delay=report_delay,
                ),
            )

        if not drain_on_shutdown:
            shut_down()
            return
        self._agents.drain(
            node,
            deadline_ns=round(drain_deadline * 1e9),
            mark_eligible=False,
            meta={"message": "shutting down"},
            accessor=f"client:{node.id}",
        )
        give_up = self.state.now() + drain_deadline + 5.0

        def poll() -> None:
            if node.drain_strategy is None or self.state.now() >= give_up:
                shut_down()
            else:
                self.state.call_later(_SELF_DRAIN_POLL, poll)

        self.state.call_later(0, poll)

    def restart_all(
        self,
        *,
        downtime: float,
        lose_fraction: float,
        lose_containers: float = 0.0,
        report_delay: float = 1.0,
    ) -> None:
        """Every agent at once, with the field's failure mode on return (hashicorp/nomad#23937)."""
        for node in self.state.every_node():
            self._agents.stop_agent(node)
        self.state.call_later(
            downtime, lambda: self._return_all(lose_fraction, lose_containers, report_delay)
        )

    def _return_all(self, lose_fraction: float, lose_containers: float, report_delay: float) -> None:
        """The agents start again and register; while they are still initializing, the restored
        clients drop some runner jobs for good: so a listing taken between an agent's registration
        and its node's ready still shows jobs that are about to vanish."""
        for node in self.state.every_node():
            self._agents.start_agent(node, lose_containers=lose_containers, report_delay=report_delay)
        lose_at = self._agents.config.agent_ready_delay / 2
        self.state.call_later(lose_at, lambda: self._lose_on_restore(lose_fraction))

    def _lose_on_restore(self, lose_fraction: float) -> None:
        state = self.state
        runners = sorted(k for k in state.jobs if not self._agents.scheduler.is_environment_job(k))
        lost = state.rng.sample(runners, round(len(runners) * min(max(lose_fraction, 0.0), 1.0)))
        for key in lost:
            # Gone without a JobDeregistered or any other event.
            state.forget_job_silently(key)
            self._agents.scheduler.forget_blocked(key)
        environments = [k for k in state.jobs if self._agents.scheduler.is_environment_job(k)]
        with state.write("AllocationUpdated") as tx:
            for key in environments:
                self._agents.scheduler.forget_blocked(key)
                for evaluation_id in list(state.open_evals_by_job.get(key, ())):
                    state.eval_changed(tx, state.evals[evaluation_id], status="complete")
                for alloc in state.allocs_by_job.get(key, {}).values():
                    if alloc.client_status in ("pending", "running", "lost") and not alloc.next_allocation:
                        # The restored client finds the task gone and reports it complete: a batch
                        # job ends dead, a service job's is replaced once its node is ready.
                        self._agents.finish_tasks(alloc, "Terminated", "Exit Code: 0")
                        state.alloc_changed(
                            tx,
                            alloc,
                            client_status="complete",
                            desired_status="run",
                            desired_description="",
                            client_description="All tasks have completed",
                        )
                        self._agents.exec.kill_alloc(alloc.id)

    # -- containers gone on restore -------------------------------------------------------------

    def restore(self, node: SimNode, lose_containers: float, report_delay: float) -> None:
        """The returning agent restores its running tasks: ``lose_containers`` of them (drawn) have
        no container left, as have those still unreported from an earlier return."""
        state = self.state
        running = sorted(
            (
                a
                for a in state.every_alloc()
                if a.node_id == node.id and a.client_status == "running" and not a.server_terminal
            ),
            key=lambda a: a.id,
        )
        fresh = [a for a in running if not a.container_lost]
        count = round(len(fresh) * min(max(lose_containers, 0.0), 1.0))
        for alloc in state.rng.sample(fresh, count) if count else []:
            alloc.container_lost = True
            self._agents.exec.kill_alloc(alloc.id)
            self._agents.exec.reset_workspace(alloc)
        back = node.back_since
        for alloc in running:
            if alloc.container_lost:
                state.call_later(report_delay, partial(self._report_restore_failure, alloc, node, back))

    def _report_restore_failure(self, alloc: SimAlloc, node: SimNode, back: float) -> None:
        """Once it has contacted the servers, the client writes the task pending with "Failed
        Restoring Task", and runs it again in a new container (not counted as a restart)."""
        if not alloc.container_lost or not node.agent_up or node.back_since != back:
            return  # run again already, or the agent went away before it reported
        state = self.state
        if alloc.server_terminal or alloc.client_terminal:
            alloc.container_lost = False
            return
        now_ns = state.now_ns()
        for task in alloc.tasks:
            task_state = alloc.task_states.setdefault(task, {"Events": [], "Restarts": 0})
            events = [
                *list(task_state.get("Events") or []),
                task_event("Failed Restoring Task", RESTORE_FAILED, now_ns, FailsTask=False),
            ]
            task_state.update(Events=events[-TASK_EVENT_LIMIT:], State="pending")
        with state.write("AllocationUpdated") as tx:
            state.alloc_changed(
                tx,
                alloc,
                client_status="pending",
                client_description="No tasks have started",
                task_states=dict(alloc.task_states),
            )
        state.timers.call_later(state.config.alloc_start_delay, lambda: self._run_restored(alloc.id))

    def _run_restored(self, alloc_id: str) -> None:
        alloc = self.state.alloc(alloc_id)
        if alloc is not None:
            alloc.container_lost = False
            self._agents.restarted(alloc_id, counted=False)
