"""Permanent faults: what retrying cannot mend, told at once and told once.

A fault is a condition of the world that no retry of the daemon's own can end: Nomad refuses the
daemon's token, or refuses the job of an environment. It holds until the operator acts (or until the
thing that was refused succeeds after all). Health is CRITICAL while any holds, ``/metrics`` counts
them by kind, and the log says it once when it starts, at most once a minute while it lasts, and
once when it ends: never once per retry.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final

import attrs
import trio
from loguru import logger

__all__ = ["Fault", "FaultKind", "Faults"]

# A fault that lasts is told again this often at most.
RETOLD_EVERY: Final = 60.0


class FaultKind(enum.Enum):
    """What is refused for good."""

    TOKEN_REFUSED = "token_refused"  # the event stream or the listings: 403
    ENVIRONMENT_REFUSED = "environment_refused"  # an environment's job: 400, a validation 500, 403


@attrs.define
class Fault:
    """One fault that holds: why, what to do about it, and since when (trio's clock)."""

    kind: FaultKind
    subject: str
    reason: str
    remedy: str
    since: float
    told_at: float

    @property
    def line(self) -> str:
        """The fault and its remedy, in one line."""
        return f"{self.reason}; {self.remedy}"


class Faults:
    """The faults that hold now, keyed by kind and subject (an environment's ID, the stream)."""

    def __init__(self, clock: Callable[[], float] = trio.current_time) -> None:
        self._clock = clock
        self._faults: dict[tuple[FaultKind, str], Fault] = {}

    def report(self, kind: FaultKind, subject: str, reason: str, remedy: str) -> Fault:
        """The fault holds (again): logged if it is new, or changed, or last told a minute ago."""
        now = self._clock()
        fault = self._faults.get((kind, subject))
        if fault is None or fault.reason != reason:
            since = fault.since if fault is not None else now
            fault = self._faults[(kind, subject)] = Fault(kind, subject, reason, remedy, since, now)
            logger.bind(fault=kind.value).error("{}", fault.line)
        elif now - fault.told_at >= RETOLD_EVERY:
            fault.told_at = now
            logger.bind(fault=kind.value).error("still, for {:.0f}s: {}", now - fault.since, fault.line)
        return fault

    def clear(self, kind: FaultKind, subject: str) -> None:
        """The fault no longer holds (what was refused went through): logged once."""
        fault = self._faults.pop((kind, subject), None)
        if fault is not None:
            held = self._clock() - fault.since
            logger.bind(fault=kind.value).info("no longer: {} (it held {:.0f}s)", fault.reason, held)

    def holds(self, kind: FaultKind, subject: str) -> bool:
        """Whether this fault holds now."""
        return (kind, subject) in self._faults

    def active(self) -> list[Fault]:
        """Every fault that holds, oldest first."""
        return sorted(self._faults.values(), key=lambda f: (f.since, f.kind.value, f.subject))

    def count(self, kind: FaultKind) -> int:
        """How many faults of this kind hold."""
        return sum(1 for k, _ in self._faults if k is kind)
