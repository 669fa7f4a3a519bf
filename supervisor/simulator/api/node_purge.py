"""Purging a node (``POST /v1/node/:id/purge``, Nomad's ``Node.Deregister``): the node's record is
deleted (``NodeDeregistration``, a Node event with the node as it was) and every job that had an
allocation on it gets a ``node-update`` evaluation, in which its allocations there are lost and
replaced.

The purge does not stop the node's agent. As a Nomad client that finds its node gone on its next
heartbeat, an agent still up registers its node again (same ID, a new CreateIndex, status
``initializing``, then ``ready``) and stops the allocations it was running; an agent that was down
does so when it starts again.
"""

from __future__ import annotations

from typing import Any, Final

from ..handle import ClusterHandle
from ..http.errors import NomadError
from ..state.objects import SimNode

__all__ = ["NodePurge"]

# A client heartbeats about once per TTL; TTL and grace are each about half the grace configured.
_HEARTBEAT_SHARE: Final = 0.5


class NodePurge:
    """Node deregistration, and the node's return while its agent lives on."""

    def __init__(self, cluster: ClusterHandle) -> None:
        self.cluster = cluster
        self.state = cluster.state
        self.agents = cluster.agents
        self.scheduler = cluster.scheduler

    def purge(self, node_id: str) -> dict[str, Any]:
        """Deregister the node; Nomad's NodeUpdateResponse (an unknown node is a 500)."""
        state = self.state
        node = state.nodes.get(node_id)
        if node is None:
            raise NomadError(500, "node not found")
        with state.write("NodeDeregistration") as tx:
            del state.nodes[node.id]
            tx.touch(node)
        index = state.index
        # What was pending for the node's record goes with it: a heartbeat check finds it down
        # already, a drain deadline finds no drain.
        node.status, node.drain_strategy = "down", None
        jobs = sorted({(a.namespace, a.job_id) for a in state.allocs.values() if a.node_id == node.id})
        jobs += sorted(k for k, j in state.jobs.items() if j.type == "system" and k not in jobs)
        evaluations = []
        if jobs:
            with state.write("EvaluationUpdated") as tx:
                evaluations = [
                    state.new_eval(tx, key, "node-update", node_id=node.id, node_modify_index=index)
                    for key in jobs
                ]
        for evaluation in evaluations:
            self.scheduler.enqueue(evaluation)
        self._await_return(node)
        return {
            "EvalCreateIndex": evaluations[0].create_index if evaluations else 0,
            "EvalIDs": [e.id for e in evaluations] or None,
            "Features": 0,
            "HeartbeatTTL": 0,
            "Index": index,
            "KnownLeader": False,
            "LastContact": 0,
            "LeaderRPCAddr": "",
            "NextToken": "",
            "NodeModifyIndex": index,
            "NumNodes": 0,
            "SchedulingEligibility": "",
            "Servers": None,
        }

    def _await_return(self, node: SimNode) -> None:
        def on_start(started: SimNode) -> None:
            if started is node:
                self.agents.stop_calling_when_an_agent_starts(on_start)
                self._recreate(node)

        self.agents.call_when_an_agent_starts(on_start)
        if node.agent_up:
            delay = self.state.config.heartbeat_grace * _HEARTBEAT_SHARE
            self.state.call_later(delay, lambda: self._heartbeat_finds_it_gone(node, on_start))

    def _recreate(self, node: SimNode) -> None:
        """The node's record as a fresh registration makes it, back in the table."""
        if node.id in self.state.nodes:
            return
        node.status, node.eligibility, node.last_drain = "initializing", "eligible", None
        node.events, node.create_index, node.committed_status = [], 0, ""
        self.state.nodes[node.id] = node

    def _heartbeat_finds_it_gone(self, node: SimNode, on_start: Any) -> None:
        state = self.state
        if not node.agent_up or node.id in state.nodes:
            return
        self.agents.stop_calling_when_an_agent_starts(on_start)
        self._recreate(node)
        with state.write("NodeRegistration") as tx:
            node.status_updated_at = int(state.now_ns() // 10**9)
            node.add_event("Node registered", "Cluster", state.time_string(), state.index + 1)
            tx.touch(node)
        for alloc in state.allocs.values():
            if alloc.node_id == node.id and alloc.client_status == "lost":
                self.cluster.agents.exec.kill_alloc(alloc.id)
        state.timers.call_later(state.config.agent_ready_delay, lambda: self._ready(node))

    def _ready(self, node: SimNode) -> None:
        state = self.state
        if not node.agent_up or node.status != "initializing" or node.id not in state.nodes:
            return
        with state.write("NodeStreamEvent") as tx:
            node.status = "ready"
            node.status_updated_at = int(state.now_ns() // 10**9)
            tx.touch(node)
        self.scheduler.unblock()
