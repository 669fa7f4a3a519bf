"""The cluster's ground truth about runners, kept as it changes: which runner jobs are alive (their
job registered and not stopped, an allocation of it running in a container its agent has), since
when each one is not, and whether Nomad wrote that; and which nodes drain, since when."""

from __future__ import annotations

import re
from typing import Final

from attrs import define, field

from ..simulator import SimulatedCluster
from ..simulator.state.objects import SimJob, SimNode
from ..simulator.state.store import Write

__all__ = ["Truth", "is_runner_job"]

_RUNNER_JOB: Final = re.compile(r"^\d+-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def is_runner_job(job_id: str) -> bool:
    """A runner job's ID: ``<environment id>-<uuid>``."""
    return bool(_RUNNER_JOB.match(job_id))


@define(eq=False)
class Truth:
    """Which runner jobs are alive, and when each that was stopped being so."""

    cluster: SimulatedCluster
    alive: set[str] = field(factory=set)
    # Runner job ID -> the virtual time it was first seen not alive, after it had been.
    died_at: dict[str, float] = field(factory=dict)
    # Runner job ID -> the virtual time it was first seen alive.
    born_at: dict[str, float] = field(factory=dict)
    # Runner jobs whose death no write of Nomad's told (a job it forgot, a container its agent came
    # back without): whatever Nomad writes of them later, a listing or an event could not have
    # shown the death when it happened.
    silent_deaths: set[str] = field(factory=set)
    # Runner job ID -> the node its allocation ran on last.
    nodes: dict[str, str] = field(factory=dict)
    # Node name -> when its drain began, for every node that drains now (an operator's or its
    # agent's own, until the drain completes or is cancelled).
    draining_since: dict[str, float] = field(factory=dict)

    def __attrs_post_init__(self) -> None:
        self.cluster.state.after_write.append(self._written)

    def is_alive(self, job_id: str) -> bool:
        """The job exists, is not stopped, and an allocation of it runs, in a container its agent
        has (not one it came back without and has not yet run again)."""
        state = self.cluster.state
        job = state.jobs.get(("default", job_id))
        if job is None or job.stop:
            return False
        return any(
            a.client_status == "running" and a.desired_status == "run" and not a.container_lost
            for a in state.allocs_by_job.get(("default", job_id), {}).values()
        )

    def exists(self, job_id: str) -> bool:
        """Nomad still has the job (stopped or not)."""
        return ("default", job_id) in self.cluster.state.jobs

    def node_of(self, job_id: str) -> str:
        """The node the runner's allocation runs (or last ran) on; "" if it never had one."""
        return self.nodes.get(job_id, "")

    def drain_began(self, node: str) -> float | None:
        """When the node's drain began, if it drains now."""
        return self.draining_since.get(node)

    def runner_jobs(self) -> list[str]:
        """Every runner job Nomad has that is not stopped, sorted."""
        return sorted(
            j for (_, j), job in self.cluster.state.jobs.items() if is_runner_job(j) and not job.stop
        )

    def _written(self, tx: Write) -> None:
        now = self.cluster.state.now()
        for _, obj in tx.touched.values():
            if isinstance(obj, SimNode):
                if obj.drain_strategy is None:
                    self.draining_since.pop(obj.name, None)
                else:
                    self.draining_since.setdefault(obj.name, now)
        touched = {
            obj.id if isinstance(obj, SimJob) else getattr(obj, "job_id", "")
            for _, obj in tx.touched.values()
        }
        touched |= {job.id for job in tx.deleted_jobs}
        # A job forgotten without an event (an agent restored without it) shows as missing here.
        candidates = {j for j in touched if is_runner_job(j)} | self.alive
        for job_id in sorted(candidates):
            alive = self.is_alive(job_id)
            if alive and job_id not in self.alive:
                self.alive.add(job_id)
                self.born_at.setdefault(job_id, now)
                self.died_at.pop(job_id, None)
                self.silent_deaths.discard(job_id)
            elif not alive and job_id in self.alive:
                self.alive.discard(job_id)
                self.died_at[job_id] = now
                if job_id not in touched:
                    self.silent_deaths.add(job_id)
            if alive:
                running = (
                    a.node_name
                    for a in self.cluster.state.allocs_by_job.get(("default", job_id), {}).values()
                    if a.client_status == "running"
                )
                self.nodes[job_id] = next(running, self.nodes.get(job_id, ""))
