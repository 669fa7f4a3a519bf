"""The histogram that /metrics exposes."""

from __future__ import annotations

import pytest

from supervisor.base.histogram import Histogram


def test_each_observation_counts_in_its_bucket_and_every_one_above() -> None:
    histogram = Histogram((0.5, 1.0, 5.0))
    for value in (0.1, 0.5, 0.7, 3.0, 60.0):
        histogram.observe(value)
    assert histogram.cumulative() == [("0.5", 2), ("1", 3), ("5", 4), ("+Inf", 5)]
    assert histogram.count == 5
    assert histogram.total == pytest.approx(64.3)


def test_bounds_must_ascend() -> None:
    with pytest.raises(ValueError, match="ascending"):
        Histogram((1.0, 0.5))
