"""The daemon: its nursery tree, from the API server down to the runner factory.

Daemon.run
├── [embedded simulated Nomad cluster, when no Nomad address is configured]
├── infrastructure: RunnerFactory.run, inactivity expiry, PrewarmingPoolAlerter.run
│   └── execution nursery: one task per execution (each in its own cancel scope) and per download
│       └── intake: EventStreamWatcher.run, the API server (hypercorn)
└── shutdown unwinds intake first (stop accepting, let running requests finish within the
    graceful timeout), then executions (given the same deadline), then infrastructure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Any

import hypercorn.trio
import trio
from hypercorn.config import Config as HypercornConfig
from loguru import logger

from . import hypercorn_patch
from .alerter import PrewarmingPoolAlerter
from .api import create_app
from .config import Settings
from .nomad import NomadClient, NomadSettings
from .service import RunnerService
from .watcher import EventStreamWatcher

__all__ = ["Daemon"]


class Daemon:
    def __init__(self, settings: Settings, environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.environ = dict(os.environ if environ is None else environ)
        self.service: RunnerService | None = None
        self.watcher: EventStreamWatcher | None = None
        self.cluster: object | None = None
        self._stop = trio.Event()
        self.addresses: list[str] = []

    def stop(self) -> None:
        """Begin a graceful stop."""
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        nomad = self.settings.nomad_settings(self.environ)
        async with trio.open_nursery() as root:
            if nomad is None:
                nomad = await self._start_embedded_cluster(root)
            async with NomadClient(nomad) as client:
                await self._run_tiers(client, task_status)
            root.cancel_scope.cancel("the daemon stopped")

    async def _start_embedded_cluster(self, nursery: trio.Nursery) -> NomadSettings:
        from .simulator import SimConfig, SimulatedCluster

        cluster = await nursery.start(SimulatedCluster(SimConfig(nodes=2)).run)
        self.cluster = cluster
        logger.warning(
            "no Nomad address configured (nomad.address or NOMAD_ADDR): started the embedded simulated "
            "cluster at {}; its exec runs local processes, it is not an isolation boundary",
            ", ".join(cluster.addresses),
        )
        return NomadSettings(addresses=tuple(cluster.addresses))

    async def _run_tiers(self, client: NomadClient, task_status: trio.TaskStatus[Daemon]) -> None:
        settings = self.settings
        hypercorn_patch.apply()
        service = self.service = RunnerService(client, settings)
        graceful = settings.server.graceful_timeout
        async with trio.open_nursery() as infrastructure:
            await infrastructure.start(service.factory.run)
            await infrastructure.start(service.run_expiry)
            await infrastructure.start(PrewarmingPoolAlerter(service, settings.alert).run)
            async with trio.open_nursery() as executions:
                service.executions.nursery = service.files.nursery = executions
                async with trio.open_nursery() as intake:
                    watcher = self.watcher = EventStreamWatcher(
                        service,
                        heartbeat_timeout=settings.watcher.heartbeat_timeout,
                        resync_interval=settings.watcher.resync_interval,
                    )
                    await intake.start(watcher.run)
                    intake.start_soon(self._ensure_configured_environments, service)
                    config = HypercornConfig()
                    config.bind = [f"{settings.server.address}:{settings.server.port}"]
                    config.graceful_timeout = graceful
                    config.accesslog = None
                    app: Any = create_app(service, settings)  # starlette's and hypercorn's ASGI types differ
                    serve = partial(
                        hypercorn.trio.serve,
                        app,
                        config,
                        shutdown_trigger=self._stop.wait,
                    )
                    async with trio.open_nursery() as serving:
                        self.addresses = await serving.start(serve)
                        logger.info("serving the API on {}", ", ".join(self.addresses))
                        task_status.started(self)
                    # On stop, hypercorn refuses new connections and lets running requests (and the
                    # executions' WebSockets) finish within the graceful timeout; then intake ends.
                    intake.cancel_scope.cancel("the API server stopped")
                executions.cancel_scope.deadline = trio.current_time() + graceful
            infrastructure.cancel_scope.cancel("the daemon stopped")

    async def _ensure_configured_environments(self, service: RunnerService) -> None:
        if not self.settings.environments:
            return
        await service.synced.wait()
        await service.ensure_environments(self.settings.environments)
