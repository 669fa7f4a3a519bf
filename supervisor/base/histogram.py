"""A histogram as Prometheus exposes one: how many observations fell at or below each bound, and
their sum."""

from __future__ import annotations

import bisect

__all__ = ["Histogram"]


class Histogram:
    """Observations counted into buckets with the given upper bounds (and one past the last)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError("a histogram's bounds must be distinct and ascending")
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Count one observation."""
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def merged(self, other: Histogram) -> Histogram:
        """A new histogram holding both one's and ``other``'s observations (the same bounds)."""
        if other.bounds != self.bounds:
            raise ValueError("only histograms of the same bounds merge")
        both = Histogram(self.bounds)
        both._counts = [a + b for a, b in zip(self._counts, other._counts, strict=True)]
        both.total = self.total + other.total
        both.count = self.count + other.count
        return both

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` for each bound and ``+Inf``: observations at or below it."""
        running, rows = 0, []
        for bound, count in zip((*(f"{b:g}" for b in self.bounds), "+Inf"), self._counts, strict=True):
            running += count
            rows.append((bound, running))
        return rows
