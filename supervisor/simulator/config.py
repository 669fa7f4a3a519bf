"""Settings of the simulated cluster: its size, the Nomad version it imitates, and its timings.

Every delay is in seconds on trio's clock, so tests run the whole cluster on virtual time.
"""

from __future__ import annotations

from typing import Any, Final

from attrs import field, frozen
from attrs.validators import in_

from ..nomad.acl_rules import PolicyError, parse_policy
from .http.trouble import ServerTrouble
from .state.fingerprint import HostSize

__all__ = [
    "ACL_TOKEN_TYPES",
    "ENVIRONMENT_JOB_PREFIX",
    "SCHEDULER_ALGORITHMS",
    "AclPolicy",
    "AclToken",
    "SimConfig",
    "parse_version",
]

# The field's failure modes tell environment (template) jobs from runner jobs by this prefix.
ENVIRONMENT_JOB_PREFIX: Final = "template-"
SCHEDULER_ALGORITHMS: Final = ("spread", "binpack")
ACL_TOKEN_TYPES: Final = ("client", "management")


def parse_version(version: str) -> tuple[int, int, int]:
    """``"1.10.5"`` as ``(1, 10, 5)``."""
    major, minor, patch = (int(part) for part in version.split("-")[0].split("."))
    return major, minor, patch


@frozen
class AclPolicy:
    """A Nomad ACL policy: its name and its rules, HCL or JSON as ``nomad acl policy apply`` takes them
    (acl.py reads them). A policy named "anonymous" applies to requests without a token."""

    name: str
    rules: str
    description: str = ""


@frozen
class AclToken:
    """A Nomad ACL token: its secret, and the policies it holds (a management token needs none)."""

    secret_id: str
    policies: tuple[str, ...] = ()
    name: str = ""
    type: str = field(default="client", validator=in_(ACL_TOKEN_TYPES))


def _positive(config: SimConfig, attribute: Any, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive whole number, got {value!r}")


def _valid_cni_networks(config: SimConfig, attribute: object, names: tuple[str, ...]) -> None:
    for name in names:
        if not name or not all(c.isalnum() or c in "-_." for c in name):
            raise ValueError(f"cni_networks: {name!r} is not a CNI network name")


def _valid_policies(config: SimConfig, attribute: object, policies: tuple[AclPolicy, ...]) -> None:
    for policy in policies:
        try:
            parse_policy(policy.rules)
        except PolicyError as exc:
            raise ValueError(f"acl_policies: {policy.name}: {exc}") from None


def _valid_tokens(config: SimConfig, attribute: object, tokens: tuple[AclToken, ...]) -> None:
    names = {policy.name for policy in config.acl_policies}
    for token in tokens:
        unknown = sorted(set(token.policies) - names)
        if unknown:
            raise ValueError(
                f"acl_tokens: {token.name or 'a token'} holds {unknown[0]!r}, no policy of acl_policies"
            )


@frozen
class SimConfig:
    """The simulated cluster's size, imitated Nomad version, timings and fault settings."""

    servers: int = 3
    nodes: int = 3
    seed: int = 0
    # Behaviour that changed between releases follows this version (1.10.5 is what Poseidon runs).
    nomad_version: str = "1.10.5"
    region: str = "global"
    datacenter: str = "dc1"
    # A management token (the bootstrap token). With it or any of acl_tokens set, ACLs are on: every
    # request needs a token (X-Nomad-Token or Authorization: Bearer) whose policies allow it (acl.py).
    acl_token: str = ""
    acl_tokens: tuple[AclToken, ...] = field(default=(), validator=_valid_tokens)
    acl_policies: tuple[AclPolicy, ...] = field(default=(), validator=_valid_policies)
    # The cluster's time 0 as Unix nanoseconds (the CreateTime and ModifyTime of what it writes);
    # None: the wall clock when it starts. A deterministic simulation fixes it.
    epoch_ns: int | None = None

    # How long an answer of the HTTP API takes to reach its client once Nomad computed it.
    response_latency: float = 0.0
    # Windows in which the servers answer 500s and slowly (trouble.py): none at first; a fault
    # opens one while the cluster runs. Shared by the clusters that share this config.
    trouble: ServerTrouble = field(factory=ServerTrouble, eq=False, repr=False)

    # Scheduler and client timings.
    eval_delay: float = 0.005
    alloc_start_delay: float = 0.05
    task_kill_delay: float = 0.02
    # Multiplies the delays of restart and reschedule policies (a job's "15s" becomes 15 s * scale).
    policy_delay_scale: float = 1.0
    # Missed heartbeats: a node whose agent is gone turns down after TTL + grace.
    heartbeat_grace: float = 20.0
    # From an agent's registration (status initializing) to its node's ready: fingerprinting.
    agent_ready_delay: float = 0.2
    election_timeout: float = 1.5

    # Terminal allocations of runner jobs purged before the cluster started (see history.py).
    history_allocations: int = 0

    # Garbage collection of dead jobs and of terminal allocations.
    gc_interval: float = 60.0
    job_gc_threshold: float = 4 * 3600.0
    alloc_gc_threshold: float = 3600.0

    # The event broker and the stream.
    event_buffer_size: int = 100
    heartbeat_interval: float = 30.0

    # The reschedule flood (seed 000: "Too many open files" on every agent): an agent that, within
    # flood_window of coming back, is starting more than flood_limit tasks at once crashes, and is
    # back after flood_downtime, when it restores (starts) its pending allocations again. 0 turns it
    # off. Starts at once = placements per second on the node x alloc_start_delay.
    flood_limit: int = 0
    flood_window: float = 10.0
    flood_downtime: float = 5.0

    # Placement capacity of one node (allocations that are not client-terminal).
    node_capacity: int = 100_000
    # What each node offers to placement (fingerprint.py): CPU in MHz, memory and disk in MiB, and
    # the CNI networks configured on it (a group network "cni/<name>" lands only where it is).
    node_cpu_mhz: int = field(default=HostSize().cpu_mhz, validator=_positive)
    node_memory_mb: int = field(default=HostSize().memory_mb, validator=_positive)
    node_disk_mb: int = field(default=HostSize().disk_mb, validator=_positive)
    cni_networks: tuple[str, ...] = field(default=HostSize().cni_networks, validator=_valid_cni_networks)
    # The operator's scheduler_algorithm: "spread", as Poseidon requires of its cluster, or Nomad's
    # own default "binpack", which ranks the fuller of the nodes it looks at first.
    scheduler_algorithm: str = field(default="spread", validator=in_(SCHEDULER_ALGORITHMS))
    # The operator's memory oversubscription: on, as a cluster of runners wants (a task's MemoryMaxMB
    # is its ceiling); only the scheduler's configuration tells it.
    memory_oversubscription: bool = True
    dynamic_port_range: tuple[int, int] = field(default=(20000, 32000))

    @property
    def acl_enabled(self) -> bool:
        """Whether requests need a token: some token is configured."""
        return bool(self.acl_token or self.acl_tokens)

    @property
    def host_size(self) -> HostSize:
        """What each node offers."""
        return HostSize(self.node_cpu_mhz, self.node_memory_mb, self.node_disk_mb, self.cni_networks)

    @property
    def version(self) -> tuple[int, int, int]:
        """The imitated Nomad version as a tuple."""
        return parse_version(self.nomad_version)

    @property
    def eligibility_event_type(self) -> str:
        """NodeDrain up to Nomad 2.0.0, NodeEligibility from 2.0.1 (PR #27858)."""
        return "NodeEligibility" if self.version >= (2, 0, 1) else "NodeDrain"

    @property
    def hijacks_event_stream(self) -> bool:
        """From 1.11.2 the stream is raw NDJSON on a hijacked connection, not a chunked body."""
        return self.version >= (1, 11, 2)

    @property
    def checks_exec_before_upgrade(self) -> bool:
        """Up to 2.0.2 a bad ``command`` fails as HTTP 500 before the WebSocket upgrade."""
        return self.version <= (2, 0, 2)
