"""The runner tiers wired together: the pool, the informer, the effects and the desk.

Nothing here decides or acts: the pool (with its node tracker) decides, synchronously and without
I/O; the informer hands it what Nomad says; the desk hands it what the API asks and what exec
sessions found; the effects carry out what it returns. This module only builds them, each given
what it uses, in the order that needs no later assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import trio

from ..base.context import TermContext
from ..base.entropy import Entropy
from ..base.faults import Faults
from ..base.levels import Requests
from ..core.config import Settings
from ..core.environments import ExecutionEnvironment
from ..core.job_template import JobShape
from ..core.pool import RunnerPool
from ..effects.agent_locator import PoolAgentLocator
from ..effects.alerter import PrewarmingPoolAlerter
from ..effects.effects import Effects
from ..effects.environment_store import EnvironmentStore
from ..effects.factory import RunnerFactory
from ..effects.job_template_file import job_shape
from ..effects.leftovers import LeftoverSweep
from ..effects.probes import RunnerProbes
from ..effects.stopping import CommandStops
from ..informer.informer import Informer
from ..nomad.api import NomadApi
from .desk import RunnerDesk
from .executions import ExecutionService
from .figures import DeskFigures
from .files import FileService

__all__ = ["RunnerService"]


class RunnerService:
    """One term of the runner tiers (the daemon's run, or an HA term): their parts, wired."""

    def __init__(
        self,
        client: NomadApi,
        settings: Settings,
        *,
        execution_nursery: trio.Nursery,
        entropy: Entropy | None = None,
        shape: JobShape | None = None,
    ) -> None:
        # Every random choice and generated ID of the term's parts comes from ``entropy``; what no
        # retry mends (a refused token, a refused environment job) is health's to tell.
        context = TermContext(Entropy() if entropy is None else entropy, Faults())
        self.entropy, self.faults = entropy, faults = context.entropy, context.faults
        # The one writer of the runners' state; every other part reads its view, and hands it
        # changes through its one entry (``Effects.tell``).
        pool = RunnerPool(entropy=entropy)
        # The pool as every other part reads it.
        self.pool = pool.view
        # The term's client: where each allocation's agent runs, for exec straight to it, the pool
        # says (its node tracker owns what is known of agents).
        self.client = client = client.located(PoolAgentLocator(pool))
        self.settings = settings
        execution = settings.execution
        self.relists = relists = Requests()
        self.stops = CommandStops(
            client,
            task=execution.task,
            grace=execution.stop_grace,
            nursery=execution_nursery,
            entropy=entropy,
        )
        # What the API's work came to, per environment (claims, executions, file transfers).
        self.figures = figures = DeskFigures()
        self.executions = ExecutionService(
            client,
            execution,
            self.stops,
            execution_nursery=execution_nursery,
            context=context,
            figures=figures,
        )
        # What runner jobs are built from: the job template (read at startup) and [nomad]'s settings.
        shape = job_shape(settings) if shape is None else shape
        self.factory = RunnerFactory(
            client, pool, settings.factory, entropy=entropy, faults=faults, shape=shape
        )
        leftovers = LeftoverSweep(
            client,
            task=execution.task,
            grace=execution.stop_grace,
            alloc_of=pool.view.used_alloc_id,
            nursery=execution_nursery,
            entropy=entropy,
        )
        probes = partial(RunnerProbes, client, task=execution.task, nursery=execution_nursery)
        self.effects = Effects(pool, self.factory, self.executions, relists, leftovers, probes)
        self.environments = EnvironmentStore(
            client, pool.view, self.effects.tell, entropy=entropy, faults=faults, shape=shape
        )
        self.informer = Informer(
            client, self.effects, self.environments, settings, entropy=entropy, faults=faults
        )
        self.gate = self.informer.gate
        self.files = files = FileService(
            client,
            execution,
            self.stops,
            execution_nursery=execution_nursery,
            allocation_in_use=pool.view.knows_alloc,
            entropy=entropy,
        )
        self.desk = RunnerDesk(
            client,
            self.effects,
            self.informer,
            executions=self.executions,
            files=files,
            admission=settings.admission,
            figures=figures,
        )
        self.alerter = PrewarmingPoolAlerter(pool.view, relists, settings.alert)

    # -- what the tree asks of a term -------------------------------------------------------------

    @property
    def running_count(self) -> int:
        """Executions running now."""
        return self.executions.running_count

    def begin_stop(self) -> None:
        """Nothing new starts: an execution whose WebSocket connects from now on does not run."""
        self.executions.begin_stop()

    async def wait_executions_ended(self) -> None:
        """Return once no execution runs."""
        await self.executions.all_ended()

    async def wait_synced(self) -> None:
        """Return once the first listing of Nomad is reconciled."""
        await self.informer.synced.wait()

    def making_progress(self, within: float) -> bool:
        """Whether the informer moved on within the last ``within`` seconds."""
        return self.informer.making_progress(within)

    async def ensure_environments(self, environments: Sequence[ExecutionEnvironment]) -> None:
        """The configured environments, in Nomad once its first listing is in."""
        await self.wait_synced()
        await self.environments.ensure(environments)

    async def wait_stops_idle(self) -> None:
        """Return once no stop of a command is under way."""
        await self.stops.wait_idle()

    def abandon_stops(self) -> int:
        """Cancel every stop of a command under way, shield and all; how many there were."""
        return self.stops.abandon()
