"""The daemon: its nursery tree, from the API server down to the runner factory.

Daemon.run
├── [embedded simulated Nomad cluster, when no Nomad address is configured]
├── infrastructure: RunnerFactory.run, inactivity expiry, node tracker (silent agents),
│   PrewarmingPoolAlerter.run
│   └── execution nursery: one task per execution (each in its own cancel scope) and per download
│       └── intake: EventStreamWatcher.run, configured environments, the API server (hypercorn)
└── shutdown unwinds intake first (stop accepting, let running requests finish within the
    graceful timeout), then executions (given the same deadline), then infrastructure.

Every child but the executions runs under ``supervise`` with its spec in CHILDREN: a crash is
logged and the child restarted, touching no sibling and no execution (they are not its
descendants); past the restart intensity the daemon stops gracefully, as on SIGTERM.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Final, cast

import hypercorn.trio
import trio
from hypercorn.config import Config as HypercornConfig
from loguru import logger

from . import hypercorn_patch
from .alerter import PrewarmingPoolAlerter
from .api import create_app
from .config import Settings
from .election import LockElector
from .network import Network, TcpNetwork
from .nomad import NomadClient, NomadSettings
from .nomad.locks import VariableLocks
from .observability import status_line
from .service import RunnerService
from .standby import RoleSwitch
from .stopping import abandon_stops
from .supervision import ChildSpec, Restart, RestartIntensity, supervise
from .systemd import SystemdNotifier
from .watcher import EventStreamWatcher

__all__ = ["CHILDREN", "Daemon"]

# The long-lived children of the tree above, each with its restart policy (OTP's child specs),
# restarted one for one, all counted against [supervision] intensity and period. The node tracker
# is as pure as the pool, and the watcher feeds it; its task only looks, every second, for agents
# that have said nothing about the runners placed on their nodes.
CHILDREN: Final = {
    "factory": Restart.PERMANENT,
    "inactivity expiry": Restart.PERMANENT,
    "node tracker": Restart.PERMANENT,
    "prewarming-pool alerter": Restart.PERMANENT,
    "event-stream watcher": Restart.PERMANENT,
    # One-shot: done once the configured environments are in Nomad; restarted only if it crashed.
    "configured environments": Restart.TRANSIENT,
    # Returns when it has stopped on request; a crash restarts it on the same address.
    "api server": Restart.TRANSIENT,
}


# systemd's STATUS= is refreshed this often at most (seconds), and the watchdog pinged as often as
# it asks, while the watcher has moved on within _WATCHER_STUCK seconds: a quiet stream has a
# heartbeat every 30 s and a lost one a reconnect attempt within the backoff's 10 s cap, each
# bounded by its own timeout.
_STATUS_EVERY: Final = 5.0
_WATCHER_STUCK: Final = 120.0
# While stopping, what the stop waits for is logged this often (seconds).
_WAIT_LOG_EVERY: Final = 5.0
# Running executions are ended this long before the stop's budget passes, so that their commands
# are stopped (for at most 1 s) and their clients told within it.
_END_MARGIN: Final = 2.0
_LISTEN_BACKLOG: Final = 2048
KEEP_ALIVE_TIMEOUT: Final = 75.0


class Daemon:
    """The daemon's nursery tree: ``run`` serves until ``stop()``, or until a child keeps failing."""

    def __init__(
        self,
        settings: Settings,
        environ: Mapping[str, str] | None = None,
        *,
        network: Network | None = None,
    ) -> None:
        self.settings = settings
        self.network: Network = network or TcpNetwork()
        self.environ = dict(os.environ if environ is None else environ)
        self.service: RunnerService | None = None
        self.elector: LockElector | None = None
        self.watcher: EventStreamWatcher | None = None
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
        # Why the daemon stopped on its own (a child past the restart intensity), if it did.
        self.failure: str | None = None
        self.restarts = RestartIntensity(settings.supervision.intensity, settings.supervision.period)

    def stop(self) -> None:
        """Begin a graceful stop within ``server.graceful_timeout``; called again, stop at once."""
        now = trio.current_time()
        if not self._stop.is_set():
            self._stop_deadline = now + self.settings.server.graceful_timeout
            self._stop.set()
            self.systemd.notify("STOPPING=1", "STATUS=stopping")
            if self.service is not None:
                self.service.executions.begin_stop()
        else:  # the running executions are told at once, and get _END_MARGIN to hear it
            self._stop_deadline = min(self._stop_deadline, now + _END_MARGIN)
        self._stop_changed.set()

    async def run(self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``stop()`` (or until a child keeps failing); reports itself once the API serves."""
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
                async with NomadClient(nomad, network=self.network) as client:
                    if self.settings.ha.enabled:
                        await self._run_terms(client, task_status)
                    else:
                        await self._run_tiers(client, task_status)
            self.systemd.close()
            root.cancel_scope.cancel("the daemon stopped")

    async def _start_embedded_cluster(self, nursery: trio.Nursery) -> NomadSettings:
        from .simulator import SimConfig, SimulatedCluster

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

    async def _run_tiers(self, client: NomadClient, task_status: trio.TaskStatus[Daemon]) -> None:
        settings = self.settings
        hypercorn_patch.apply()

        async def start(nursery: trio.Nursery, name: str, run: Callable[..., Awaitable[object]]) -> object:
            spec = ChildSpec(name, run, CHILDREN[name])
            supervised = partial(supervise, spec, self.restarts, self._escalate, stopping=self._stop.is_set)
            return await nursery.start(supervised)

        async with trio.open_nursery() as infrastructure:
            async with trio.open_nursery() as executions:
                # The service is handed the execution nursery, as trio's serve_tcp takes its
                # handler_nursery; its own children run in the outer tier, which outlives it.
                service = self.service = RunnerService(client, settings, execution_nursery=executions)
                alerter = PrewarmingPoolAlerter(service, settings.alert)
                await start(infrastructure, "factory", service.factory.run)
                await start(infrastructure, "inactivity expiry", service.expiry.run)
                await start(infrastructure, "node tracker", service.find_silent_agents)
                await start(infrastructure, "prewarming-pool alerter", alerter.run)
                infrastructure.start_soon(self._end_executions_in_time, service)
                infrastructure.start_soon(self._tell_systemd, service)
                await self._run_intake(service, start, task_status)
                # Cut, if it comes to that, by _end_executions_in_time at the stop's deadline.
            infrastructure.cancel_scope.cancel("the daemon stopped")

    async def _tell_systemd(self, service: RunnerService) -> None:
        """READY=1 once the first listing is reconciled and the API serves; STATUS= when it
        changes; WATCHDOG=1 while this loop runs and the watcher makes progress."""
        notifier = self.systemd
        if not notifier.enabled:
            return
        every = min(notifier.watchdog_interval or _STATUS_EVERY, _STATUS_EVERY)
        readiness = trio.Event()

        async def wake_when_ready() -> None:
            await self._serving.wait()
            await service.synced.wait()
            readiness.set()

        async with trio.open_nursery() as waiting:
            waiting.start_soon(wake_when_ready)
            await self._notify_until_stopped(service, every, readiness)
            waiting.cancel_scope.cancel()

    async def _notify_until_stopped(
        self, service: RunnerService, every: float, readiness: trio.Event
    ) -> None:
        notifier = self.systemd
        ready, told = False, ""
        while not self._stop.is_set():
            lines = []
            if not ready and readiness.is_set():
                ready = True
                lines.append("READY=1")
            status = status_line(service) if ready else "starting: waiting for Nomad's first listing"
            if status != told:
                told = status
                lines.append(f"STATUS={status}")
            watcher = self.watcher
            if notifier.watchdog_interval and (watcher is None or watcher.making_progress(_WATCHER_STUCK)):
                lines.append("WATCHDOG=1")
            if lines:
                notifier.notify(*lines)
            with trio.move_on_after(every):
                await (self._stop if ready else readiness).wait()  # not ready yet: woken when it is

    async def _end_executions_in_time(self, service: RunnerService) -> None:
        """Once stopping: say every few seconds what the stop waits for; end the executions still
        running _END_MARGIN before the budget passes (at once after a second signal); when it has
        passed, close whatever connection is left and cut everything."""
        await self._stop.wait()
        ended = False
        next_line = trio.current_time()
        while True:
            now = trio.current_time()
            left = self._stop_deadline - now
            if left <= 0:
                closed = hypercorn_patch.close_connections()
                abandoned = abandon_stops()
                logger.warning(
                    "stopping: the budget has passed; {} connection(s) cut, {} command stop(s) left "
                    "to the next start",
                    closed,
                    abandoned,
                )
                self._scope.cancel("the stop's budget has passed")
                return
            running = service.executions.running_count
            if not ended and left <= _END_MARGIN:
                ended = True
                service.executions.shut_down()
                if running:
                    logger.warning("stopping: ended {} running execution(s): out of time", running)
            elif not ended and running and now >= next_line:
                logger.info("stopping: waiting for {} execution(s), {:.0f}s left", running, left)
                next_line = now + _WAIT_LOG_EVERY
            wake = self._stop_deadline if ended else min(next_line, self._stop_deadline - _END_MARGIN)
            self._stop_changed = trio.Event()
            with trio.move_on_at(wake):
                await self._stop_changed.wait()

    async def _run_intake(
        self,
        service: RunnerService,
        start: Callable[[trio.Nursery, str, Callable[..., Awaitable[object]]], Awaitable[object]],
        task_status: trio.TaskStatus[Daemon],
    ) -> None:
        """The watcher and the API server: on stop, hypercorn refuses new connections and lets
        running requests (and the executions' WebSockets) finish within the graceful timeout."""
        settings = self.settings
        watcher = self.watcher = EventStreamWatcher(
            service,
            heartbeat_timeout=settings.watcher.heartbeat_timeout,
            resync_interval=settings.watcher.resync_interval,
        )
        serve = partial(
            hypercorn.trio.serve,
            create_app(service, settings),  # type: ignore[arg-type]  # starlette's ASGI types differ
            self._hypercorn_config(),
            shutdown_trigger=self._stop.wait,
        )
        async with trio.open_nursery() as intake:
            await start(intake, "event-stream watcher", watcher.run)
            await start(
                intake, "configured environments", partial(self._ensure_configured_environments, service)
            )
            async with trio.open_nursery() as serving:
                self.addresses = cast(list[str], await start(serving, "api server", serve))
                logger.info("serving the API on {}", ", ".join(self.addresses))
                self._serving.set()
                task_status.started(self)
            intake.cancel_scope.cancel("the API server stopped")

    async def _run_terms(self, client: NomadClient, task_status: trio.TaskStatus[Daemon]) -> None:
        """``[ha]``: the API serves from the start, as the standby; each time this daemon takes the
        lock, a term begins with a fresh service that lists Nomad and adopts what it finds (as a
        start does), and it ends when the lock is lost or not renewed in time (step down: nothing
        new is started, running executions finish) or at the stop (then the lock is released)."""
        hypercorn_patch.apply()
        elector = self.elector = LockElector(VariableLocks(client), self.settings.ha)
        switch = RoleSwitch(retry_after=elector.interval)
        serve = partial(
            hypercorn.trio.serve,
            switch,  # type: ignore[arg-type]  # hypercorn's ASGI types differ
            self._hypercorn_config(),
            shutdown_trigger=self._stop.wait,
        )
        async with trio.open_nursery() as serving:
            spec = ChildSpec("api server", serve, CHILDREN["api server"])
            supervised = partial(supervise, spec, self.restarts, self._escalate, stopping=self._stop.is_set)
            self.addresses = cast(list[str], await serving.start(supervised))
            logger.info("serving the API on {}", ", ".join(self.addresses))
            logger.info("HA: the standby until this daemon holds the lock {}", self.settings.ha.lock_path)
            self._serving.set()
            task_status.started(self)
            while not self._stop.is_set():
                acquired = await self._until_stopped(elector.acquire)
                if acquired is None:
                    break
                await self._term(client, switch, elector, acquired)

    async def _until_stopped(self, wait: Callable[[], Awaitable[float]]) -> float | None:
        """``wait()``'s result, or None if the daemon is told to stop first."""
        result: float | None = None
        async with trio.open_nursery() as racing:

            async def waiting() -> None:
                nonlocal result
                result = await wait()
                racing.cancel_scope.cancel()

            racing.start_soon(waiting)
            await self._stop.wait()
            racing.cancel_scope.cancel()
        return result

    async def _term(
        self, client: NomadClient, switch: RoleSwitch, elector: LockElector, acquired: float
    ) -> None:
        """One term as the active daemon (see ``_run_terms``)."""
        settings = self.settings

        async def start(nursery: trio.Nursery, name: str, run: Callable[..., Awaitable[object]]) -> object:
            spec = ChildSpec(name, run, CHILDREN[name])
            supervised = partial(supervise, spec, self.restarts, self._escalate, stopping=self._stop.is_set)
            return await nursery.start(supervised)

        why = "the daemon stops"
        async with trio.open_nursery() as overseer:
            async with trio.open_nursery() as executions:
                service = self.service = RunnerService(client, settings, execution_nursery=executions)
                if self._stop.is_set():
                    service.executions.begin_stop()
                async with trio.open_nursery() as acting:
                    watcher = self.watcher = EventStreamWatcher(
                        service,
                        heartbeat_timeout=settings.watcher.heartbeat_timeout,
                        resync_interval=settings.watcher.resync_interval,
                    )
                    await start(acting, "factory", service.factory.run)
                    await start(acting, "inactivity expiry", service.expiry.run)
                    await start(acting, "node tracker", service.find_silent_agents)
                    alerter = PrewarmingPoolAlerter(service, settings.alert)
                    await start(acting, "prewarming-pool alerter", alerter.run)
                    await start(acting, "event-stream watcher", watcher.run)
                    configured = partial(self._ensure_configured_environments, service)
                    await start(acting, "configured environments", configured)
                    acting.start_soon(self._tell_systemd, service)
                    switch.app = create_app(service, settings)

                    async def hold() -> None:
                        nonlocal why
                        why = await elector.hold(acquired)
                        acting.cancel_scope.cancel()

                    acting.start_soon(hold)
                    await self._stop.wait()
                    acting.cancel_scope.cancel()
                switch.app = None  # new requests get the standby's answer from here on
                if self._stop.is_set():
                    overseer.start_soon(self._end_executions_in_time, service)
                else:
                    elector.stepped_down()
                    logger.warning(
                        "stepping down: {}; nothing new starts here, {} running execution(s) may finish",
                        why,
                        service.executions.running_count,
                    )
            overseer.cancel_scope.cancel()  # the executions have ended
        if self._stop.is_set():
            await elector.release()

    def _hypercorn_config(self) -> HypercornConfig:
        config = HypercornConfig()
        config.bind = [f"{self.settings.server.address}:{self.settings.server.port}"]
        # Requests still open when the budget has passed are cut (executions were ended before).
        config.graceful_timeout = self.settings.server.graceful_timeout
        config.websocket_max_message_size = self.settings.server.max_message
        # hypercorn's default backlog (100) overflowed when a thousand clients connected within
        # seconds (scripts/bench_scale.py): the kernel reset the connections past it.
        config.backlog = _LISTEN_BACKLOG
        # Longer than clients keep an idle connection (httpx 5 s, hypercorn's default too): at equal
        # timeouts a client could send on a connection the server was closing, and a POST cannot be
        # sent again (a node_down scenario's execute: "Server disconnected without sending a response").
        config.keep_alive_timeout = KEEP_ALIVE_TIMEOUT
        # Plain loggers: their lines reach the one log stream (logs.py) instead of hypercorn's own.
        config.errorlog = logging.getLogger("hypercorn.error")
        config.accesslog = logging.getLogger("hypercorn.access") if self.settings.log.access else None
        return config

    def _escalate(self, reason: str) -> None:
        """A child went past the restart intensity: stop gracefully, and say why on the way out."""
        if self.failure is None:
            self.failure = reason
            logger.error("stopping: {}", reason)
        self.stop()

    async def _ensure_configured_environments(
        self, service: RunnerService, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        if not self.settings.environments:
            return
        await service.synced.wait()
        await service.environments.ensure(self.settings.environments)
