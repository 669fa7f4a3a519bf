"""The one backoff: full jitter under an exponential cap, forgotten only after a healthy stretch."""

from __future__ import annotations

import pytest

from supervisor.base.backoff import Backoff, BackoffPolicy


def test_the_cap_doubles_per_failure_up_to_its_limit() -> None:
    policy = BackoffPolicy(base=0.5, cap=4.0)
    assert [policy.delay(n, 1.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert policy.delay(3, 0.25) == pytest.approx(0.5), "full jitter: a uniform share of the cap"
    assert policy.delay(10_000, 1.0) == 4.0


def test_failures_are_forgotten_only_after_a_healthy_stretch() -> None:
    backoff = Backoff(BackoffPolicy(1.0, 100.0), healthy_after=60.0, random_fraction=lambda: 1.0)
    assert backoff.failed(0.0) == 1.0
    assert backoff.failed(1.0) == 2.0
    backoff.healthy(2.0)
    assert backoff.failed(3.0) == 4.0, "up for 1 s only: a flapping server keeps its backoff"
    backoff.healthy(10.0)
    backoff.healthy(20.0)  # still the same stretch, since 10 s
    assert backoff.failed(70.0) == 1.0, "up for 60 s: a fresh start"
