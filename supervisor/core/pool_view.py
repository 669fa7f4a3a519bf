"""What the runner pool says of its runners, without changing them: the reads of the rest of the
daemon (the desk, the informer, the factory, the reports) and of the pool itself. ``RunnerPool``
holds the state and changes it, through its one entry; this is its face for questions.

``RunnerPool.view`` is a view over the very structures the pool changes (it never copies them), so
it is always current. A runner it returns is the pool's own object: read it, never change it.
"""

from __future__ import annotations

from ..nomad.agents import AgentRoute
from .environments import ExecutionEnvironment
from .evidence import Moment
from .nodes import NodeTracker
from .runners import PoolStats, Runner, RunnerState, Tombstone

__all__ = ["PoolView"]


class PoolView:
    """The pool's reads; the state they read is ``RunnerPool``'s."""

    environments: dict[int, ExecutionEnvironment]
    runners: dict[str, Runner]
    nodes: NodeTracker
    tombstones: dict[str, Tombstone]
    found_gone: dict[str, int]
    _idle: dict[int, dict[str, None]]
    _by_alloc: dict[str, str]
    _of_environment: dict[int, dict[str, Runner]]
    _used: dict[str, Runner]
    _pulled: dict[int, set[str]]

    @classmethod
    def sharing(cls, pool: PoolView) -> PoolView:
        """A view of ``pool``'s structures, which the pool changes in place and never replaces."""
        view = cls()
        view.environments, view.runners, view.nodes = pool.environments, pool.runners, pool.nodes
        view.tombstones, view.found_gone = pool.tombstones, pool.found_gone
        view._idle, view._by_alloc = pool._idle, pool._by_alloc
        view._of_environment, view._used = pool._of_environment, pool._used
        view._pulled = pool._pulled
        return view

    def runner(self, runner_id: str) -> Runner | None:
        """The runner by that ID, whatever its state."""
        return self.runners.get(runner_id)

    def all_runners(self) -> list[Runner]:
        """Every runner the pool knows."""
        return list(self.runners.values())

    def environment(self, environment_id: int) -> ExecutionEnvironment | None:
        """The environment as the pool knows it."""
        return self.environments.get(environment_id)

    def all_environments(self) -> list[ExecutionEnvironment]:
        """Every environment the pool knows, by ID."""
        return [environment for _, environment in sorted(self.environments.items())]

    def node_draining(self, node_id: str) -> bool:
        """Whether the node drains now."""
        return self.nodes.draining(node_id)

    def found_gone_counts(self) -> dict[str, int]:
        """Runners found gone, by how (``FOUND_BY_*``)."""
        return dict(self.found_gone)

    def runner_of_alloc(self, alloc_id: str) -> Runner | None:
        """The runner whose allocation this is, if any."""
        runner = self.runners.get(self._by_alloc.get(alloc_id, ""))
        return runner if runner is not None and runner.alloc_id == alloc_id else None

    def used_runner(self, runner_id: str) -> Runner | None:
        """The runner if a client holds it, else None."""
        runner = self.runners.get(runner_id)
        return runner if runner is not None and runner.state is RunnerState.USED else None

    def serving_runner(self, runner_id: str) -> Runner | None:
        """A used runner that may start something new: not on a draining node."""
        runner = self.used_runner(runner_id)
        return runner if runner is not None and not runner.moving else None

    def used_alloc_id(self, runner_id: str) -> str | None:
        """The allocation of the used runner, while it is one."""
        runner = self.used_runner(runner_id)
        return runner.alloc_id if runner is not None and runner.alloc_id else None

    def knows_alloc(self, alloc_id: str) -> bool:
        """Whether the allocation is a runner's."""
        return self.runner_of_alloc(alloc_id) is not None

    def runners_in(self, state: RunnerState) -> list[str]:
        """The runners in ``state``."""
        return [r.id for r in self.runners.values() if r.state is state]

    def environment_ids(self) -> list[int]:
        """The environments the pool knows, by ID."""
        return sorted(self.environments)

    def unknown(self, job_id: str) -> bool:
        """Whether the pool neither knows the runner job nor removed it."""
        return job_id not in self.runners and job_id not in self.tombstones

    def suspect_runners(self) -> list[str]:
        """The runners whose agent restarted and that nothing has proven since."""
        return [r.id for r in self.runners.values() if r.suspect_since]

    def expired(self, now: float) -> list[str]:
        """Used runners idle past their inactivity timeout (never while an execution runs)."""
        return [
            r.id
            for r in self._used.values()
            if r.inactivity_timeout > 0
            and r.executions == 0
            # The very sum next_expiry() gives as the deadline: ``now - last >= timeout`` can be
            # False at that deadline by a rounding, and the expiry woken for it would spin.
            and now >= r.last_activity + r.inactivity_timeout
        ]

    def inactivity_deadline(self, runner_id: str) -> float | None:
        """When the used runner expires unless something works in it first; None if it does not
        expire now (no timeout, or a request or an execution works in it)."""
        runner = self.used_runner(runner_id)
        if runner is None or runner.inactivity_timeout <= 0 or runner.executions:
            return None
        return runner.last_activity + runner.inactivity_timeout

    def next_expiry(self) -> float | None:
        """The soonest inactivity deadline of a used runner with nothing running in it."""
        deadlines = [
            r.last_activity + r.inactivity_timeout
            for r in self._used.values()
            if r.inactivity_timeout > 0 and r.executions == 0
        ]
        return min(deadlines, default=None)

    def agent_route(self, alloc_id: str) -> AgentRoute | None:
        """Where the allocation's agent is, for exec straight to it (``AgentLocator``): its runner's
        node, as the node tracker knows it."""
        runner = self.runner_of_alloc(alloc_id)
        if runner is None or not runner.node_id:
            return None
        return self.nodes.agent_route(runner.node_id)

    def unreachable_agents(self) -> list[str]:
        """The nodes whose agent could not be reached since it last registered."""
        return self.nodes.unreachable_agents()

    def silent_nodes(self, at: Moment) -> list[str]:
        """The nodes whose agents are silent at ``at`` (``NodeTracker.silent``)."""
        return self.nodes.silent(at.flowed, at.now)

    def depleting(self, threshold: float) -> list[int]:
        """The environments whose pools are depleting (see PoolStats.is_depleting)."""
        return [k for k, stats in self.stats().items() if stats.is_depleting(threshold)]

    def stats(self) -> dict[int, PoolStats]:
        """Each environment's pool, by environment ID, in ID order."""
        stats = {}
        for environment_id, environment in sorted(self.environments.items()):
            runners = self._runners_of(environment_id)
            stats[environment_id] = PoolStats(
                environment_id=environment_id,
                size=environment.prewarming_pool_size,
                idle=len(self._idle.get(environment_id, ())),
                used=sum(1 for r in runners if r.state is RunnerState.USED),
                suspect=sum(1 for r in runners if r.suspect_since),
            )
        return stats

    def _runners_of(self, environment_id: int) -> list[Runner]:
        return list(self._of_environment.get(environment_id, {}).values())

    def pulled_everywhere(self, environment_id: int) -> bool:
        """Whether every node Nomad may place a runner on was given one of the environment's runners
        that pulled its image since it was last put: only then may a claim's replacement skip the pull,
        as Poseidon's does, without starting an image a node kept from before a roll-out."""
        pulled = self._pulled.get(environment_id, set())
        return all(node.id in pulled for node in self.nodes.nodes.values() if node.placeable)

    def avoided_nodes(self, now: float) -> tuple[str, ...]:
        """The nodes new runners avoid at ``now`` (``NodeTracker.avoided``)."""
        return self.nodes.avoided(now)

    def placeable_nodes(self) -> list[str]:
        """The nodes Nomad may place new runners on."""
        return [node.id for node in self.nodes.nodes.values() if node.placeable]

    def draining_node_names(self) -> list[str]:
        """The nodes that drain, by name (their ID when they have none)."""
        return sorted(node.name or node.id for node in self.nodes.draining_nodes())

    def avoided_node_names(self, now: float) -> list[str]:
        """The nodes new runners avoid at ``now``, by name."""
        return sorted(self.nodes.nodes[n].name or n for n in self.nodes.avoided(now))

    def runner_counts(self) -> dict[tuple[int, RunnerState], int]:
        """How many runners each environment has in each state."""
        counts: dict[tuple[int, RunnerState], int] = {}
        for runner in self.runners.values():
            key = (runner.environment_id, runner.state)
            counts[key] = counts.get(key, 0) + 1
        return counts
