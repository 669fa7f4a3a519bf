"""What the desk's work came to, per environment, for ``/metrics``: claims by outcome and how long the
claimed ones took, executions by outcome and how long they ran, file transfers by direction and
their bytes.

The desk and the execution service count here as the work ends; ``/metrics`` reads the figures when
Prometheus scrapes. Counting is a dict update: no lock (one trio thread), no label that names a
runner. ``environment`` is an environment's ID as decimal text, or ``unknown`` for a claim naming an
environment the pool does not know, so that no client can grow the label set at will (``/metrics``
shows a deleted environment's counts under it too).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from ..base.histogram import Histogram

__all__ = [
    "CLAIM_BUCKETS",
    "CLAIM_OUTCOMES",
    "DIRECTIONS",
    "DOWNLOAD",
    "EXECUTION_BUCKETS",
    "EXECUTION_OUTCOMES",
    "UNKNOWN_ENVIRONMENT",
    "UPLOAD",
    "Counts",
    "DeskFigures",
    "Durations",
]

UNKNOWN_ENVIRONMENT: Final = "unknown"
CLAIM_OUTCOMES: Final = ("claimed", "no_idle_runner", "unreachable", "unknown_environment", "error")
# An execution's terminal message, or ``closed``: its client left first.
EXECUTION_OUTCOMES: Final = ("exit", "timeout", "error", "closed")
UPLOAD: Final = "upload"
DOWNLOAD: Final = "download"
DIRECTIONS: Final = (UPLOAD, DOWNLOAD)
# From a claim's request to its answer: the idle runner handed out, its 'used' mark in Nomad.
CLAIM_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# From an execution's start message to its end: a student's test run, up to a long time limit.
EXECUTION_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)


class Counts:
    """Counters by ``(environment, what)``: an outcome, a direction."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, environment: str, what: str, amount: int = 1) -> None:
        """Count ``amount`` more of ``what`` in ``environment``."""
        key = (environment, what)
        self._counts[key] = self._counts.get(key, 0) + amount

    def get(self, environment: str, what: str) -> int:
        """The count so far (0 before the first)."""
        return self._counts.get((environment, what), 0)

    def items(self) -> Iterator[tuple[tuple[str, str], int]]:
        """Each ``((environment, what), count)`` counted so far."""
        return iter(self._counts.items())

    def by_what(self) -> dict[str, int]:
        """The counts summed over the environments."""
        summed: dict[str, int] = {}
        for (_, what), count in self._counts.items():
            summed[what] = summed.get(what, 0) + count
        return summed


class Durations:
    """One histogram per environment, with the same bounds."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._histograms: dict[str, Histogram] = {}

    def observe(self, environment: str, seconds: float) -> None:
        """Count one duration in ``environment``."""
        histogram = self._histograms.get(environment)
        if histogram is None:
            histogram = self._histograms[environment] = Histogram(self.bounds)
        histogram.observe(seconds)

    def get(self, environment: str) -> Histogram | None:
        """The environment's histogram, None before its first duration."""
        return self._histograms.get(environment)

    def items(self) -> Iterator[tuple[str, Histogram]]:
        """Each ``(environment, histogram)`` observed so far."""
        return iter(self._histograms.items())


class DeskFigures:
    """The term's figures of the work the API asked for."""

    def __init__(self) -> None:
        # POST /runners by outcome, and the claimed ones' time from request to answer.
        self.claims = Counts()
        self.claim_seconds = Durations(CLAIM_BUCKETS)
        # Ended executions by outcome, and their time from the start message to the end.
        self.executions = Counts()
        self.execution_seconds = Durations(EXECUTION_BUCKETS)
        # File requests that succeeded by direction, and the bytes of contents written or sent.
        self.transfers = Counts()
        self.transfer_bytes = Counts()
