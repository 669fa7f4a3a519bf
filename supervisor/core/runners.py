"""What the pool is made of: runners and their states, the actions the pool asks for, tombstones,
the statistics it reports, and the reasons it gives when a runner ends (``supervisor/pool.py``)."""

from __future__ import annotations

import enum
from typing import Final

from attrs import define, frozen

from ..nomad import PortMapping
from .environments import ExecutionEnvironment

__all__ = [
    "FOUND_BY",
    "Action",
    "CreateRunner",
    "DestroyRunner",
    "FactoryAction",
    "MarkUsed",
    "NodeAvoided",
    "PoolStats",
    "RelistWanted",
    "Runner",
    "RunnerGone",
    "RunnerStarted",
    "RunnerState",
    "Tombstone",
]


class RunnerState(enum.Enum):
    """Where a runner stands: starting (no running allocation yet), idle, or used by a client."""

    STARTING = "starting"
    IDLE = "idle"
    USED = "used"


@frozen
class CreateRunner:
    """Register a new runner job for the environment; ``force_pull``: its image pulled anew (a
    runner that fills a pool), or not (the replacement of a claimed one), as Poseidon does."""

    runner_id: str
    environment_id: int
    force_pull: bool = True


@frozen
class DestroyRunner:
    """Purge the runner's job; ``reason`` says why, for the log."""

    runner_id: str
    reason: str


@frozen
class MarkUsed:
    """Record the claim in the job's meta, re-registering the spec the runner was created with: a
    spec change would replace its allocation under its client. ``in_place``: the job is not of our
    shape (Poseidon wrote it), so the claim is written as Poseidon writes it: the job read back
    from Nomad with only its claim group's meta changed."""

    runner_id: str
    environment: ExecutionEnvironment
    timeout: int
    force_pull: bool = False
    in_place: bool = False


@frozen
class RunnerGone:
    """A used runner is gone: its executions end with ``reason``; its client gets 410 from now on."""

    runner_id: str
    reason: str


@frozen
class RelistWanted:
    """Only a fresh listing can prove or dismiss some runners: ask the informer for one now."""

    reason: str


@frozen
class ProbeRunner:
    """A suspect runner that a listing taken since its agent came back shows running: only a
    command that runs in it proves that its container does (``effects/probes.py``)."""

    runner_id: str
    alloc_id: str


@frozen
class NodeAvoided:
    """New runners avoid the node for a while: its agent could not be reached, or (``silent``) said
    nothing of the runners placed there. Nothing to carry out but to say so."""

    node: str
    silent: bool


@frozen
class RunnerStarted:
    """The runner's allocation runs for the first time (the factory times its start)."""

    runner_id: str


FactoryAction = CreateRunner | DestroyRunner | MarkUsed
Action = FactoryAction | RunnerGone | RelistWanted | NodeAvoided | RunnerStarted | ProbeRunner

# Why a used runner ended, as its executions' error message says it.
REASON_DESTROYED: Final = "the runner was destroyed by request"
REASON_ALLOCATION_STOPPED: Final = "the allocation stopped"
REASON_REPLACED: Final = (
    "the allocation was replaced (restarted, rescheduled or migrated); its files are gone"
)
REASON_JOB_GONE: Final = "the runner's Nomad job is gone"
REASON_CONTAINER_LOST: Final = (
    "the runner is gone: its agent restarted without its container (its files are gone)"
)
REASON_FAILED_IDLE: Final = "its task failed while idle: a new runner is faster than its restart"
REASON_AGENT_AWAY: Final = "it waits to start on a node whose agent is out of reach"
REASON_ENVIRONMENT: Final = "the execution environment was deleted"
REASON_INACTIVITY: Final = "the runner was idle for longer than its inactivity timeout"
# Poseidon's text, which the real client matches.
REASON_OOM: Final = "the allocation was OOM Killed"
REASON_DRAINED: Final = "the node was drained: the allocation was migrated and its files are gone"
REASON_NODE_DOWN: Final = "the node went down: the allocation was lost"
REASON_ALLOCATION_UNKNOWN: Final = "the runner is gone: Nomad no longer knows its allocation"
REASON_UNSTOPPABLE: Final = "an execution could not be stopped"

# How a runner was found gone, for the figures (a runner given back or expired is not "found").
FOUND_BY_EVENT: Final = "event"
FOUND_BY_LISTING: Final = "listing"
FOUND_BY_NODE_RESTART: Final = "node restart"
FOUND_BY_EXEC_REFUSAL: Final = "exec refusal"
FOUND_BY: Final = (FOUND_BY_EVENT, FOUND_BY_LISTING, FOUND_BY_NODE_RESTART, FOUND_BY_EXEC_REFUSAL)


@frozen
class PoolStats:
    """One environment's pool: its prewarming size, and its idle (proven), used and suspect runners."""

    environment_id: int
    size: int
    idle: int
    used: int
    suspect: int = 0

    def is_depleting(self, threshold: float) -> bool:
        """Fewer idle runners than ``threshold`` of the pool size (a pool of size 0 never is)."""
        return self.size > 0 and self.idle / self.size < threshold


@frozen
class Tombstone:
    """A removed runner: ``gone_at`` is the index from which Nomad no longer shows its job (None
    while its purge is under way); it is never below ``floor``, the newest index at which the pool
    knew the job to exist (Nomad answers a purge of a job it no longer knows with index 0)."""

    floor: int
    gone_at: int | None = None

    def purged(self, index: int) -> Tombstone:
        """The tombstone once a purge at ``index`` is confirmed."""
        return Tombstone(self.floor, max(self.floor, self.gone_at or 0, index))


@define(eq=False)
class Runner:
    """One runner (a Nomad job) as the pool knows it; only the pool changes it."""

    id: str
    environment_id: int
    state: RunnerState
    alloc_id: str = ""
    alloc_create_index: int = 0
    alloc_modify_index: int = 0
    node_id: str = ""
    ports: tuple[PortMapping, ...] = ()
    # The Raft index at which the runner's job is known to exist in Nomad (0: not yet).
    registered_index: int = 0
    inactivity_timeout: float = 0.0
    last_activity: float = 0.0
    executions: int = 0
    # The environment changed while the runner was used: destroy it when released.
    retired: bool = False
    # The definition the runner's job was registered from (None when adopted from a listing).
    environment: ExecutionEnvironment | None = None
    # Whether its job pulls the image anew (a claim's write must not change it).
    force_pull: bool = False
    # Its job is not of our shape (Poseidon wrote it): a claim changes only its claim group's meta.
    foreign_shape: bool = False
    # Its node drains: running executions go on, but nothing new starts on it (410 for its client).
    moving: bool = False
    # The index of its agent's restart, until newer evidence proves it alive (0: proven).
    suspect_since: int = 0

    def mapped_ports(self) -> list[dict[str, object]]:
        """The runner's ports as Poseidon's API maps them (``exposedPort``, ``hostAddress``)."""
        return [{"exposedPort": p.to, "hostAddress": f"{p.host_ip}:{p.value}"} for p in self.ports]
