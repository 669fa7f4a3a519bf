"""One backoff for every retry in the daemon: exponential, with full jitter, and forgotten only after a
healthy stretch, so that a server that flaps does not earn a fresh start every time it answers.

The pause after the n-th failure in a row is a uniform draw from [0, min(cap, base * 2**(n-1))):
"full jitter", which spreads the retries of many clients best (AWS Architecture Blog, "Exponential
Backoff And Jitter").
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import define, field, frozen

from .entropy import Entropy

__all__ = ["Backoff", "BackoffPolicy"]


@frozen
class BackoffPolicy:
    """An exponential cap (``base`` doubling up to ``cap``) under which each pause is drawn."""

    base: float = 0.5
    cap: float = 30.0

    def delay(self, failures: int, fraction: float) -> float:
        """The pause after the ``failures``-th failure in a row (1 for the first), given a uniform
        number in [0, 1)."""
        return float(fraction * min(self.cap, self.base * 2.0 ** min(max(failures, 1) - 1, 30)))


@define
class Backoff:
    """Failures in a row of one activity; ``healthy()`` starts a healthy stretch, and the count is
    forgotten at the next failure only if that stretch lasted ``healthy_after`` seconds."""

    policy: BackoffPolicy = field(factory=BackoffPolicy)
    healthy_after: float = 0.0
    # The jitter's draws: its owner's ``Entropy.fraction`` (a seeded one in a simulation); the
    # process's randomness by default.
    random_fraction: Callable[[], float] = field(factory=lambda: Entropy().fraction)
    failures: int = 0
    _healthy_since: float | None = None

    def healthy(self, now: float) -> None:
        """A healthy stretch began at ``now`` (kept if one is already under way)."""
        if self._healthy_since is None:
            self._healthy_since = now

    def failed(self, now: float) -> float:
        """Count a failure at ``now``; returns the pause before the next try."""
        if self._healthy_since is not None and now - self._healthy_since >= self.healthy_after:
            self.failures = 0
        self._healthy_since = None
        self.failures += 1
        return self.policy.delay(self.failures, self.random_fraction())
