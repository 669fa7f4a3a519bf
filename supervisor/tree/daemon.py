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

import math
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final

import attrs
import trio
from attrs import define, field
from loguru import logger

from ..api.app import create_app
from ..api.http_server import AsgiServer, HttpServerSettings
from ..api.standby import RoleSwitch
from ..base.entropy import Entropy
from ..base.errors import LockRefused
from ..base.network import Network, TcpNetwork
from ..core.config import Settings
from ..desk.service import RunnerService
from ..nomad import NomadClient, NomadSettings
from ..nomad.api import NomadApi
from ..nomad.locks import VariableLocks
from ..ops.metrics import DaemonMetrics
from ..ops.observability import status_line
from ..ops.systemd import SystemdNotifier
from .election import AlwaysActive, Elector, LockElector
from .spec import TREE, draw_tree
from .supervision import Lifetime, RestartIntensity, Shutdown, TierSpec, supervise

__all__ = ["TREE", "Daemon", "draw_tree"]

# systemd's STATUS= is refreshed this often at most (seconds), and the watchdog pinged as often as
# it asks, while the informer has moved on within _INFORMER_STUCK seconds: a quiet stream has a
# heartbeat every 30 s and a lost one a reconnect attempt within the backoff's 10 s cap, each
# bounded by its own timeout.
_STATUS_EVERY: Final = 5.0
_INFORMER_STUCK: Final = 120.0
# While stopping, what the stop waits for is logged this often (seconds).
_WAIT_LOG_EVERY: Final = 5.0
# Running executions are ended this long before the stop's budget passes, so that their commands
# are stopped (for at most 1 s) and their clients told within it.
_END_MARGIN: Final = 2.0
_LISTEN_BACKLOG: Final = 2048
KEEP_ALIVE_TIMEOUT: Final = 75.0


@define
class _Parts:
    """What a child's spec starts it from: the daemon, the term's runner service in a term, and
    the nursery of the child's tier, for what the child hands work to."""

    daemon: Daemon
    service: RunnerService | None = None
    nursery: trio.Nursery | None = None


@define
class _Tiers:
    """The open tiers: their nurseries, and when each of their children has ended for good."""

    nurseries: dict[str, trio.Nursery] = field(factory=dict)
    ended: dict[str, trio.Event] = field(factory=dict)


@define(eq=False)
class _Term:
    """One term as the active daemon."""

    service: RunnerService
    acquired_at: float
    # Set when the term is to end (the stop, or the lock lost); ``why`` says which.
    ending: trio.Event = field(factory=trio.Event)
    why: str = "the daemon stops"
    # Give the lock up at the term's end (a stop, or a hold that failed), not only let it lapse.
    release: bool = False
    # Its informer and effects run: it reads and writes Nomad (its executions may outlive this).
    acting: bool = True


class Daemon:
    """The daemon's nursery tree: ``run`` serves until ``stop()``, or until a child keeps failing."""

    def __init__(
        self,
        settings: Settings,
        environ: Mapping[str, str] | None = None,
        *,
        network: Network | None = None,
        tree: Sequence[TierSpec] = TREE,
        entropy: Entropy | None = None,
    ) -> None:
        self.settings = settings
        self.environ = dict(os.environ if environ is None else environ)
        self.network: Network = network or TcpNetwork()
        # Every random choice (jitter) and generated ID (runners, executions) of the daemon comes
        # from here: a simulation seeds it to replay a run.
        self.entropy = Entropy() if entropy is None else entropy
        self.tree = tuple(tier for tier in tree)
        self.service: RunnerService | None = None
        self.elector: Elector = AlwaysActive()
        self.cluster: object | None = None
        self._stop = trio.Event()
        # The stop's one budget: running executions are ended just before it passes.
        self._stop_deadline = float("inf")
        self._stop_changed = trio.Event()
        # Everything but the embedded cluster: cancelled when the stop's budget has passed.
        self._scope = trio.CancelScope()
        self._serving = trio.Event()
        # Set once ``run`` has returned (or raised).
        self.ended = trio.Event()
        self.systemd = SystemdNotifier(self.environ)
        self.addresses: list[str] = []
        # Active while the API serves a term's service.
        self.metrics = DaemonMetrics(lambda: self.service if self.switch.app is not None else None)
        self.switch = RoleSwitch(retry_after=settings.ha.ttl / 3, metrics=self.metrics)
        self.server = AsgiServer(self.switch, self._server_settings())
        self._term: _Term | None = None
        # Set once the first term has started its tiers.
        self._term_started = trio.Event()
        # Where the API listens once bound: a restarted server binds the same port again.
        self._api_port = settings.server.port
        # Why the daemon stopped on its own (a child past the restart intensity), if it did.
        self.failure: str | None = None
        self.restarts = RestartIntensity(settings.supervision.intensity, settings.supervision.period)

    @property
    def acting(self) -> bool:
        """In a term whose informer and effects run: this daemon reads and writes Nomad. With
        ``[ha]``, at most one daemon of a pair acts at any instant."""
        return self._term is not None and self._term.acting

    def stop(self) -> None:
        """Begin a graceful stop within ``server.graceful_timeout``; called again, stop at once."""
        now = trio.current_time()
        if not self._stop.is_set():
            self._stop_deadline = now + self.settings.server.graceful_timeout
            self._stop.set()
            self.systemd.notify("STOPPING=1", "STATUS=stopping")
            self._ask_to_stop()
            if self.service is not None:
                self.service.begin_stop()
            if self._term is not None:
                self._term.ending.set()
        else:  # the running executions are told at once, and get _END_MARGIN to hear it
            self._stop_deadline = min(self._stop_deadline, now + _END_MARGIN)
        # Every waiter holds the event of its time: a fresh one for the next change.
        changed, self._stop_changed = self._stop_changed, trio.Event()
        changed.set()

    def _ask_to_stop(self) -> None:
        """Ask every draining child that says how (the API server: stop accepting)."""
        parts = _Parts(self, self.service)
        for tier in self.tree:
            for child in tier.children:
                if child.ask is not None and (tier.lifetime is Lifetime.DAEMON or parts.service is not None):
                    child.ask(parts)()

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
            with self._scope:
                async with NomadClient(
                    nomad, network=self.network, random_fraction=self.entropy.fraction
                ) as client:
                    if self.settings.ha.enabled:
                        self.elector = LockElector(VariableLocks(client), self.settings.ha)
                    daemon_tiers = [t for t in self.tree if t.lifetime is Lifetime.DAEMON]
                    await self._nest(daemon_tiers, partial(self._terms, client, task_status))
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

    # -- the tree -------------------------------------------------------------------------------

    async def _nest(
        self,
        tiers: Sequence[TierSpec],
        body: Callable[[_Tiers], Awaitable[None]],
        opened: _Tiers | None = None,
    ) -> None:
        """Open one nursery per tier, nested in order, and run ``body`` inside the innermost (it
        starts the children); then unwind from the innermost out: each tier waits for its draining
        children within their share of the budget, and is cancelled."""
        opened = _Tiers() if opened is None else opened
        if not tiers:
            await body(opened)
            return
        tier = tiers[0]
        async with trio.open_nursery() as nursery:
            opened.nurseries[tier.name] = nursery
            await self._nest(tiers[1:], body, opened)
            await self._drain(tier, opened)
            nursery.cancel_scope.cancel(f"the {tier.name} tier stopped")

    async def _start_tiers(self, tiers: Sequence[TierSpec], parts: _Parts, opened: _Tiers) -> None:
        """Start every child of ``tiers``, tier by tier, each in its tier's nursery."""
        for tier in tiers:
            for child in tier.children:
                if child.ha_only and not self.settings.ha.enabled:
                    continue
                ended = opened.ended[child.name] = trio.Event()
                supervised = partial(
                    supervise,
                    child,
                    child.start(attrs.evolve(parts, nursery=opened.nurseries[tier.name])),
                    self.restarts,
                    self._escalate,
                    entropy=self.entropy,
                    stopping=self._stop.is_set,
                )
                await opened.nurseries[tier.name].start(_marking_end, supervised, ended)

    async def _drain(self, tier: TierSpec, opened: _Tiers) -> None:
        """Wait for the tier's draining children to return, each within its share of the budget
        (once stopping; a term that ends otherwise drains only what needs no budget)."""
        for child in tier.children:
            ended = opened.ended.get(child.name)
            if child.shutdown is not Shutdown.DRAIN or ended is None:
                continue
            budget = max(0.0, self._stop_deadline - trio.current_time()) * child.share
            with trio.move_on_after(budget):
                await ended.wait()

    async def _terms(self, client: NomadApi, task_status: trio.TaskStatus[Daemon], opened: _Tiers) -> None:
        """The daemon's tiers are open: start their children, then run one term after another
        while this daemon is active, until the stop."""
        await self._start_tiers([t for t in self.tree if t.lifetime is Lifetime.DAEMON], _Parts(self), opened)
        if self.settings.ha.enabled:
            logger.info("HA: the standby until this daemon holds the lock {}", self.settings.ha.lock_path)
            task_status.started(self)
            reported = True
        else:
            reported = False
        while not self._stop.is_set():
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
            if not self._stop.is_set():
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
        term_tiers = [t for t in self.tree if t.lifetime is Lifetime.TERM]
        settings = self.settings

        async def body(opened: _Tiers) -> None:
            service = RunnerService(
                client, settings, execution_nursery=opened.nurseries[term_tiers[0].name], entropy=self.entropy
            )
            term = self._term = _Term(service, acquired)
            self.service = service
            if self._stop.is_set():
                service.begin_stop()
                term.ending.set()
            await self._start_tiers(term_tiers, _Parts(self, service), opened)
            self.switch.app = create_app(service, settings, self.metrics)
            self._term_started.set()
            if task_status is not None:
                task_status.started(self)
            await term.ending.wait()
            service.begin_stop()  # an execution whose WebSocket connects from now on does not start
            if self._stop.is_set():
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

        async def unwound_then_released(opened: _Tiers) -> None:
            # The tiers inside the executions' (informer, effects, lock hold) are cancelled before
            # a standby may take the lock; executions finish after.
            try:
                await self._nest(term_tiers[1:], body, opened)
            finally:
                if self._term is not None:
                    self._term.acting = False
            if self._term is not None and (self._term.release or self._stop.is_set()):
                await self.elector.release()

        try:
            await self._nest(term_tiers[:1], unwound_then_released)
        finally:
            self._term = None
        if self._stop.is_set():
            await self.elector.release()

    async def _until_stopped(self, wait: Callable[[], Awaitable[float]]) -> float | None:
        """``wait()``'s result, or None if the daemon is told to stop first."""
        result: float | None = None

        async def waiting() -> None:
            nonlocal result
            result = await wait()

        await _first(waiting, self._stop.wait)
        return result

    # -- the children ---------------------------------------------------------------------------

    async def serve_api(
        self, connections: trio.Nursery, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The API server, on ``[server]``'s address (the port it was bound to, after a restart);
        its connections run in ``connections`` (its tier's nursery), so that they outlive a crash
        of the server's own task, and an execution's WebSocket with them."""
        server = self.settings.server
        listening = await self.network.listen(server.address, self._api_port, backlog=_LISTEN_BACKLOG)
        self._api_port = listening.port
        serve = partial(self.server.serve, listening, connection_nursery=connections)
        async with trio.open_nursery() as serving:
            url = await serving.start(serve)
            self.addresses = [url]
            logger.info("serving the API on {}", url)
            self._serving.set()
            task_status.started(self.addresses)

    async def hold_lock(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Renew the HA lock for the term; when it is lost (or this crashes), the term ends."""
        term = self._term
        assert term is not None
        task_status.started()
        why = "the lock's hold failed"
        try:
            why = await self.elector.hold(term.acquired_at)
        finally:
            # Failed (or cancelled): whether the lock is still ours is unknown; let a standby take it now.
            term.release = why == "the lock's hold failed"
            term.why = why
            term.ending.set()

    async def tell_systemd(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """READY=1 once the first listing is reconciled and the API serves; STATUS= when it
        changes; WATCHDOG=1 while this loop runs and the informer makes progress."""
        task_status.started()
        if not self.systemd.enabled:
            return
        every = min(self.systemd.watchdog_interval or _STATUS_EVERY, _STATUS_EVERY)
        readiness = trio.Event()

        async def wake_when_ready() -> None:
            await self._serving.wait()
            await self._term_started.wait()
            assert self.service is not None
            await self.service.wait_synced()
            readiness.set()

        async with trio.open_nursery() as waiting:
            waiting.start_soon(wake_when_ready)
            await self._notify_until_stopped(every, readiness)
            waiting.cancel_scope.cancel("the daemon stops")

    async def _notify_until_stopped(self, every: float, readiness: trio.Event) -> None:
        notifier = self.systemd
        ready, told = False, ""
        while not self._stop.is_set():
            lines = []
            service = self.service
            if not ready and readiness.is_set():
                ready = True
                lines.append("READY=1")
            starting = "starting: waiting for Nomad's first listing"
            status = status_line(service) if ready and service is not None else starting
            if status != told:
                told = status
                lines.append(f"STATUS={status}")
            if notifier.watchdog_interval and (service is None or service.making_progress(_INFORMER_STUCK)):
                lines.append("WATCHDOG=1")
            if lines:
                notifier.notify(*lines)
            with trio.move_on_after(every):
                await (self._stop if ready else readiness).wait()  # not ready yet: woken when it is

    async def end_executions_in_time(
        self, service: RunnerService, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Hold the term's executions until they have ended, once the term ends: after a step-down
        for as long as they run; at the stop, saying every few seconds what the stop waits for and
        ending those still running _END_MARGIN before the budget passes (at once after a second
        signal). Returns once none runs, and no stop of a command is under way."""
        term = self._term
        assert term is not None
        task_status.started()
        await term.ending.wait()
        executions = service.executions
        ended = False
        next_line = trio.current_time()
        while executions.running_count:
            now = trio.current_time()
            left = self._stop_deadline - now
            running = executions.running_count
            if not ended and left <= _END_MARGIN:
                ended = True
                executions.shut_down()
                logger.warning("stopping: ended {} running execution(s): out of time", running)
            elif not ended and now >= next_line and self._stop.is_set():
                logger.info("stopping: waiting for {} execution(s), {:.0f}s left", running, left)
                next_line = now + _WAIT_LOG_EVERY
            if not self._stop.is_set():
                wake = math.inf  # stepped down: they run for as long as they need (or until a stop)
            elif ended:
                wake = self._stop_deadline
            else:
                wake = min(next_line, self._stop_deadline - _END_MARGIN)
            with trio.move_on_at(wake):
                await _first(self._stop_changed.wait, executions.all_ended)
        # The stops of their commands still under way (shielded) end with the budget.
        await service.wait_stops_idle()

    async def enforce_budget(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """When the stop's budget has passed: cut whatever connection is left and every stop of a
        command under way (shielded), then everything else."""
        task_status.started()
        await self._stop.wait()
        while trio.current_time() < self._stop_deadline:
            with trio.move_on_at(self._stop_deadline):
                await self._stop_changed.wait()  # a second signal brings the deadline nearer
        closed = self.server.close_connections()
        abandoned = self.service.abandon_stops() if self.service is not None else 0
        logger.warning(
            "stopping: the budget has passed; {} connection(s) cut, {} command stop(s) left to the next "
            "start",
            closed,
            abandoned,
        )
        self._scope.cancel("the stop's budget has passed")

    async def ensure_configured_environments(
        self, service: RunnerService, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The ``[[environments]]`` of the configuration, in Nomad once its first listing is in."""
        task_status.started()
        if not self.settings.environments:
            return
        await service.ensure_environments(self.settings.environments)

    def _server_settings(self) -> HttpServerSettings:
        # Longer than clients keep an idle connection (httpx 5 s): at equal timeouts a client could
        # send on a connection the server was closing, and a POST cannot be sent again (a node_down
        # scenario's execute: "Server disconnected without sending a response").
        return HttpServerSettings(
            keep_alive_timeout=KEEP_ALIVE_TIMEOUT,
            max_message=self.settings.server.max_message,
            access_log=self.settings.log.access,
        )

    def _escalate(self, reason: str) -> None:
        """A child went past the restart intensity: stop gracefully, and say why on the way out."""
        if self.failure is None:
            self.failure = reason
            logger.error("stopping: {}", reason)
        self.stop()


async def _marking_end(
    supervised: Callable[..., Awaitable[None]],
    ended: trio.Event,
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a supervised child; ``ended`` is set when it is over for good."""
    try:
        await supervised(task_status=task_status)
    finally:
        ended.set()


async def _first(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return as soon as one of ``waits`` has returned."""
    async with trio.open_nursery() as racing:
        for wait in waits:

            async def until(wait: Callable[[], Awaitable[object]] = wait) -> None:
                await wait()
                racing.cancel_scope.cancel()

            racing.start_soon(until)
