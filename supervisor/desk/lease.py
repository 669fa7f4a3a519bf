"""A runner lease: what one request or execution working in a runner may use, for as long as it
works there.

The runner desk hands out a lease once the runner may take new work: the runner and the allocation
it works in, how long an exec waits for an agent that a server cannot reach, and how the work
reports what it found of the runner (evidence for the pool, through its one entry). While a lease is
held (``with lease:``), the runner does not expire; giving it back lets its inactivity timeout count
again. An execution may open more than one exec session on its lease (its command's, and the reader
of its stderr kept apart from its terminal): they all work in the one runner. A lease never calls up
into the desk: what it reports goes down to the pool and the effects.
An execution's end when its runner goes is the execution service's (``runner_gone``), which the
effects tell.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from attrs import define, field
from loguru import logger

from ..core.config import AdmissionSettings
from ..core.evidence import ExecFinding, Finding, Moment
from ..core.orders import Touch
from ..effects.effects import Effects

__all__ = ["RunnerLease"]


@define(eq=False)
class RunnerLease:
    """One piece of work's hold on a runner and its allocation."""

    runner_id: str
    alloc_id: str
    _admission: AdmissionSettings
    _effects: Effects
    # Now, for the pool, with how far the event stream has flowed (the informer's).
    _moment: Callable[[], Moment]
    _held: bool = field(default=False, init=False)

    @property
    def agent_wait(self) -> float:
        """How long an exec waits for an agent a server cannot reach (nothing ran)."""
        return self._admission.wait_timeout

    @property
    def agent_retry(self) -> float:
        """How often it tries that agent again meanwhile."""
        return self._admission.agent_retry_interval

    def __enter__(self) -> RunnerLease:
        self.hold()
        return self

    def hold(self) -> None:
        """The work began: the runner does not expire until it is given back (once held, idempotent)."""
        if not self._held:
            self._held = True
            self._effects.tell(Touch(self.runner_id, working=+1))

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.give_back()

    def give_back(self) -> None:
        """The work in the runner ended: its inactivity timeout counts again (idempotent)."""
        if self._held:
            self._held = False
            self._effects.tell(Touch(self.runner_id, working=-1))
            # The runner may expire again, possibly before the expiry's next wake-up.
            self._effects.deadlines_changed(self.runner_id)

    def holds(self) -> bool:
        """Whether the runner is still used, in the same allocation: a command left in an
        allocation that is gone went with it."""
        runner = self._effects.pool.used_runner(self.runner_id)
        return runner is not None and runner.alloc_id == self.alloc_id

    def found(self, finding: Finding) -> None:
        """What the work found out about its runner, for the pool."""
        if finding is Finding.ALLOCATION_UNKNOWN:
            logger.debug("runner {} is gone: Nomad no longer knows its allocation", self.runner_id)
        elif finding is Finding.AGENT_AWAY:
            logger.warning(
                "runner {}: its Nomad agent stayed out of reach; it counts as moving", self.runner_id
            )
        self._effects.tell(ExecFinding(self.runner_id, finding), self._moment())
