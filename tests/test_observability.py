"""How /metrics writes its values."""

from __future__ import annotations

import math

from supervisor.ops.observability import metric_line


def test_a_count_past_a_million_keeps_every_digit() -> None:
    assert metric_line("supervisor_executions_total", 1234567, {"outcome": "exit"}) == (
        'supervisor_executions_total{outcome="exit"} 1234567'
    )
    assert metric_line("supervisor_event_stream_up", 1.0) == "supervisor_event_stream_up 1"
    assert metric_line("start_seconds_sum", 1234.5678) == "start_seconds_sum 1234.5678"


def test_values_that_are_not_numbers_in_prometheus_spelling() -> None:
    assert metric_line("x", math.nan) == "x NaN"
    assert metric_line("x", math.inf) == "x +Inf"
    assert metric_line("x", -math.inf) == "x -Inf"
