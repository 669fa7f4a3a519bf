"""How many failed idle runners an environment replaces at once instead of waiting for Nomad.

An idle runner whose task fails restarts in place after its job's restart delay (15 s in the runner
template), and serves nobody meanwhile. A new runner job starts in about a second, so the pool
replaces such a runner at once when its restart waits ``SLOWER_THAN_A_START`` or more. But a task
that fails each time soon after it starts would then turn the pool over as fast as the factory
registers jobs: the storm that restart delays exist to prevent. So each environment may replace a
tenth of its prewarming pool size (at least one) at once, and as many again each minute after; past
that, its failed runners wait for Nomad's restart policy.
"""

from __future__ import annotations

from typing import Final

from attrs import define, field

__all__ = ["ReplacementBudget"]

# The budget refills in full over this many seconds.
REFILL_SECONDS: Final = 60.0
# A restart that waits less than this is sooner than a new runner (registration, placement, start).
SLOWER_THAN_A_START: Final = 2.0


@define
class ReplacementBudget:
    """A token bucket per environment: one token per failed idle runner replaced at once."""

    # Environment ID -> (tokens, when they were counted).
    _tokens: dict[int, tuple[float, float]] = field(factory=dict)

    @staticmethod
    def capacity(pool_size: int) -> int:
        """The replacements an environment with this prewarming pool size may make at once."""
        return max(1, pool_size // 10)

    def take(self, environment_id: int, pool_size: int, now: float) -> bool:
        """Spend one of the environment's replacements, if it has one left at ``now``."""
        capacity = self.capacity(pool_size)
        tokens, counted = self._tokens.get(environment_id, (float(capacity), now))
        tokens = min(float(capacity), tokens + max(0.0, now - counted) * capacity / REFILL_SECONDS)
        spent = tokens >= 1.0
        self._tokens[environment_id] = (tokens - 1.0 if spent else tokens, now)
        return spent

    def forget(self, environment_id: int) -> None:
        """The environment is gone: a new one of the same ID starts with a full budget."""
        self._tokens.pop(environment_id, None)
