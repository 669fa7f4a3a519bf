"""The daemon: one tree of supervised children, written as data (``TREE``), for both modes.

Daemon.run
├── platform
│   ├── systemd notifier             transient           READY=1, STATUS=, WATCHDOG=1
│   └── stop budget                  permanent           cuts what is left when the budget ends
├── intake
│   └── api server                   transient, drains   /api/v1, /metrics; 503 between terms
└── term: from the start to the stop; with [ha], one per election won
    ├── executions
    │   ├── execution deadline       transient, drains   ends executions before the budget
    │   └── one task per execution, each in its own cancel scope
    ├── knowledge
    │   ├── informer                 permanent           list + watch Nomad -> evidence
    │   └── node tracker             permanent           agents silent while others report
    ├── effects
    │   ├── factory                  permanent           Nomad's writes, paced and spread
    │   ├── inactivity expiry        permanent           claims past their timeout
    │   └── prewarming-pool alerter  permanent           depleting pools relisted
    └── acting
        ├── configured environments  transient           [[environments]] ensured in Nomad
        └── lock hold                temporary, [ha]     renews the lock; its end ends the term

Tiers start in order and stop in reverse, each one a nursery nested in the one before. The daemon's
tiers live as long as it runs; the term's tiers live for one term as the active daemon: without
``[ha]`` one term, from the start to the stop; with it, one each time the election (a Nomad
Variables lock) makes this daemon active, while the API answers as the standby in between. The
execution nursery is the term's outermost tier, so that stepping down (the lock lost) stops the
informer and the effects at once (another daemon acts now) while running executions finish; at a
stop they go on until the executions have ended.

Every child runs under ``supervise`` with its spec: a crash is logged and the child restarted as
its policy says, touching no sibling and no execution (they are not its descendants); past the
restart intensity the daemon stops gracefully, as on SIGTERM. A stop asks every draining child at
once (the API server stops accepting; the execution deadline starts counting), then unwinds the
tiers from the innermost out, waiting for each draining child within its share of the budget
before its tier is cancelled.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from functools import partial

import trio
from loguru import logger

from ..api.app import create_app
from ..api.http_server import AsgiServer
from ..api.standby import RoleSwitch
from ..base.entropy import Entropy
from ..base.errors import ConfigError, LockRefused
from ..base.network import Network, TcpNetwork
from ..core.config import Settings
from ..core.job_template import JobShape
from ..desk.service import RunnerService
from ..effects.job_template_file import startup_job_shape
from ..nomad import NomadClient, NomadSettings
from ..nomad.api import NomadApi
from ..nomad.locks import VariableLocks
from ..ops.metrics import DaemonMetrics
from ..ops.systemd import SystemdNotifier
from .api_serving import ApiEndpoint, api_server_settings, first_term_synced
from .election import AlwaysActive, Elector, LockElector
from .graceful_stop import GracefulStop
from .parts import DaemonParts, TermParts
from .spec import TREE, Tree, draw_tree
from .supervision import RestartIntensity
from .term import Term, Terms
from .tiers import NestedTiers, OpenTiers, ask_to_stop
from .wait_any import wait_any

__all__ = ["TREE", "Daemon", "draw_tree"]


class Daemon:
    """The daemon's nursery tree: ``run`` serves until ``stop()``, or until a child keeps failing."""

    def __init__(
        self,
        settings: Settings,
        environ: Mapping[str, str] | None = None,
        *,
        network: Network | None = None,
        tree: Tree = TREE,
        entropy: Entropy | None = None,
        endpoint: ApiEndpoint | None = None,
    ) -> None:
        self.settings = settings
        self.environ = dict(os.environ if environ is None else environ)
        self.network: Network = network or TcpNetwork()
        # Every random choice (jitter) and generated ID (runners, executions) of the daemon comes
        # from here: a simulation seeds it to replay a run.
        self.entropy = Entropy() if entropy is None else entropy
        self.tree = tree
        self.elector: Elector = AlwaysActive()
        self.cluster: object | None = None
        # Set once ``run`` has returned (or raised).
        self.ended = trio.Event()
        self.systemd = SystemdNotifier(self.environ)
        # Active while the API serves a term's service.
        self.metrics = DaemonMetrics(
            lambda: self.service if self.switch.app is not None else None,
            simulated=lambda: self.cluster is not None,
        )
        self.switch = RoleSwitch(
            retry_after=settings.ha.ttl / 3, metrics=self.metrics, ha=settings.ha.enabled
        )
        self.server = AsgiServer(self.switch, api_server_settings(settings))
        # Why the daemon stopped on its own (a child past the restart intensity), if it did.
        self.failure: str | None = None
        # The configuration Nomad showed wrong at startup (the job template, an environment's job).
        self.configuration_error: str | None = None
        # What runner jobs are built from: read at startup (the job template file), then every term's.
        self.shape: JobShape | None = None
        self.restarts = RestartIntensity(settings.supervision.intensity, settings.supervision.period)
        self._stop = GracefulStop(settings.server.graceful_timeout)
        self._terms = Terms()
        endpoint = endpoint or ApiEndpoint.of(settings)
        endpoint.ready = partial(first_term_synced, self._terms, settings.admission.wait_timeout)
        self._parts = DaemonParts(
            settings,
            self.network,
            self.server,
            endpoint,
            self.systemd,
            self._stop,
            self._terms,
            everything=trio.CancelScope(),
        )
        # What the running term's children started from, while a term runs.
        self._term_parts: TermParts | None = None
        self._tiers = NestedTiers(
            self.restarts, self._escalate, self._stop, self.entropy, ha=settings.ha.enabled
        )

    @property
    def service(self) -> RunnerService | None:
        """The latest term's runner service (None before the first term)."""
        return self._terms.service

    @property
    def addresses(self) -> list[str]:
        """The URLs the API serves, once it does."""
        return self._parts.endpoint.addresses

    @property
    def acting(self) -> bool:
        """In a term whose informer and effects run: this daemon reads and writes Nomad. With
        ``[ha]``, at most one daemon of a pair acts at any instant."""
        return self._terms.current is not None and self._terms.current.acting

    def stop(self) -> None:
        """Begin a graceful stop within ``server.graceful_timeout``; called again, stop at once."""
        if not self._stop.request():
            return  # the running executions are told at once, and get END_MARGIN to hear it
        self.systemd.notify("STOPPING=1", "STATUS=stopping")
        self._ask_to_stop()
        if self.service is not None:
            self.service.begin_stop()
        if self._terms.current is not None:
            self._terms.current.ending.set()

    def _ask_to_stop(self) -> None:
        ask_to_stop(self.tree.daemon, self._parts)
        if self._term_parts is not None:
            ask_to_stop(self.tree.term, self._term_parts)

    async def run(self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``stop()`` (or until a child keeps failing); reports itself once the API
        serves (and, without ``[ha]``, its term has started)."""
        try:
            await self._run(task_status)
        finally:
            self.ended.set()

    async def _run(self, task_status: trio.TaskStatus[Daemon]) -> None:
        nomad = self.settings.nomad_settings(self.environ)
        async with trio.open_nursery() as root:
            if nomad is None:
                nomad = await self._start_embedded_cluster(root)
            with self._parts.everything:
                async with NomadClient(
                    nomad, network=self.network, random_fraction=self.entropy.fraction
                ) as client:
                    if self.settings.ha.enabled:
                        self.elector = LockElector(VariableLocks(client), self.settings.ha)
                    if await self._read_job_shape(client):
                        await self._tiers.nest(
                            self.tree.daemon, partial(self._terms_until_stopped, client, task_status)
                        )
                    else:
                        task_status.started(self)
            self.systemd.close()
            root.cancel_scope.cancel("the daemon stopped")

    async def _start_embedded_cluster(self, nursery: trio.Nursery) -> NomadSettings:
        from ..simulator import SimConfig, SimulatedCluster

        cluster = await nursery.start(SimulatedCluster(SimConfig(nodes=2), network=self.network).run)
        self.cluster = cluster
        logger.warning(
            "no Nomad address configured (nomad.address or NOMAD_ADDR): started the embedded simulated "
            "cluster at {}; its exec runs local processes, it is not an isolation boundary",
            ", ".join(cluster.addresses),
        )
        # The configured [nomad] settings (timeouts), with the embedded cluster's addresses.
        nomad = self.settings.nomad_settings({"NOMAD_ADDR": ",".join(cluster.addresses)})
        assert nomad is not None
        return nomad

    async def _read_job_shape(self, client: NomadClient) -> bool:
        """Read the runner jobs' template and have Nomad check their jobs, before the API serves (a
        client is never answered by a daemon that is about to stop on its configuration): False when
        Nomad refuses them (said in one line) or the daemon was told to stop meanwhile."""
        refused: list[ConfigError] = []

        async def read() -> None:
            try:
                self.shape = await startup_job_shape(client, self.settings)
            except ConfigError as error:
                refused.append(error)

        await wait_any(read, self._stop.wait)
        if refused:
            self.configuration_error = str(refused[0])
            logger.error("stopping: {}", refused[0])
        return self.shape is not None and not self._stop.requested

    # -- the terms -------------------------------------------------------------------------------

    async def _terms_until_stopped(
        self, client: NomadClient, task_status: trio.TaskStatus[Daemon], opened: OpenTiers
    ) -> None:
        """The daemon's tiers are open: start their children, then run one term after another while
        this daemon is active, until the stop."""
        await self._tiers.start_children(self.tree.daemon, self._parts, opened)
        if self.settings.ha.enabled:
            logger.info("HA: the standby until this daemon holds the lock {}", self.settings.ha.lock_path)
            task_status.started(self)
            reported = True
        else:
            reported = False
        while not self._stop.requested:
            refused = ""
            try:
                acquired = await self._until_stopped(self.elector.acquire)
            except* LockRefused as group:
                refused, acquired = str(group.exceptions[0]), None
            if refused:
                self._escalate(refused)
            if acquired is None:
                break
            await self._run_term(client, acquired, None if reported else task_status)
            reported = True
            if not self._stop.requested:
                self.elector.stepped_down()
        if not reported:
            task_status.started(self)
        await self._stop.wait()

    async def _run_term(
        self, client: NomadApi, acquired: float, task_status: trio.TaskStatus[Daemon] | None
    ) -> None:
        """One term as the active daemon: its tiers started, the API switched to its desk; at its
        end (the stop, or the lock lost) the API answers as the standby again while the tiers
        unwind and running executions finish."""
        term_tiers = self.tree.term
        settings = self.settings

        async def body(opened: OpenTiers) -> None:
            service = RunnerService(
                client,
                settings,
                execution_nursery=opened.nurseries[term_tiers[0].name],
                entropy=self.entropy,
                shape=self.shape,
            )
            term = self._terms.current = Term(service, acquired)
            self._terms.service = service
            parts = self._term_parts = TermParts(settings, self._stop, term, self.elector)
            if self._stop.requested:
                service.begin_stop()
                term.ending.set()
            await self._tiers.start_children(term_tiers, parts, opened)
            self.switch.app = create_app(service, settings, self.metrics)
            self._terms.first_started.set()
            if task_status is not None:
                task_status.started(self)
            await term.ending.wait()
            service.begin_stop()  # an execution whose WebSocket connects from now on does not start
            if self._stop.requested:
                # The informer and the effects go on while running executions finish: a runner given
                # back meanwhile is purged, one found gone ends its executions. The stop's budget
                # cuts what is left.
                await service.wait_executions_ended()
                return
            self.switch.app = None  # stepped down: new requests get the standby's answer
            logger.warning(
                "stepping down: {}; nothing new starts here, {} running execution(s) may finish",
                term.why,
                service.running_count,
            )

        async def unwound_then_released(opened: OpenTiers) -> None:
            # The tiers inside the executions' (informer, effects, lock hold) are cancelled before
            # a standby may take the lock; executions finish after.
            try:
                await self._tiers.nest(term_tiers[1:], body, opened)
            finally:
                if self._terms.current is not None:
                    self._terms.current.acting = False
            if self._terms.current is not None and (self._terms.current.release or self._stop.requested):
                await self.elector.release()

        try:
            await self._tiers.nest(term_tiers[:1], unwound_then_released)
        finally:
            self._terms.current = self._term_parts = None
        if self._stop.requested:
            await self.elector.release()

    async def _until_stopped(self, wait: Callable[[], Awaitable[float]]) -> float | None:
        """``wait()``'s result, or None if the daemon is told to stop first."""
        result: float | None = None

        async def waiting() -> None:
            nonlocal result
            result = await wait()

        await wait_any(waiting, self._stop.wait)
        return result

    def _escalate(self, reason: str) -> None:
        """A child went past the restart intensity: stop gracefully, and say why on the way out."""
        if self.failure is None:
            self.failure = reason
            logger.error("stopping: {}", reason)
        self.stop()
