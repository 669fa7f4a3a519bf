"""The chaos soak's figures (scripts/soak_figures.py): what its invariants are judged by."""

import argparse
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))
from picture import draw_soak, rate_steps
from soak_faults import fault_kinds
from soak_figures import drift, execution_rates, outages, outside_outages, recovery_time

WHOLE = frozenset({10, 11})
SHORT_11 = frozenset({10})


def looks(*states: tuple[float, frozenset[int]]) -> list[tuple[float, frozenset[int]]]:
    return list(states)


def test_a_pool_never_short_after_the_fault_was_not_hit() -> None:
    assert recovery_time(11, 100.0, looks((100.5, WHOLE), (101.0, WHOLE))) == 0.0


def test_a_pool_is_back_at_its_first_whole_look_after_a_short_one() -> None:
    seen = looks((100.5, WHOLE), (101.0, SHORT_11), (103.0, SHORT_11), (104.25, WHOLE), (105.0, SHORT_11))
    assert recovery_time(11, 100.0, seen) == pytest.approx(4.25)
    assert recovery_time(10, 100.0, seen) == 0.0


def test_a_pool_whole_again_only_past_the_window_counts_its_whole_time() -> None:
    seen = looks((101.0, SHORT_11), (111.0, SHORT_11), (112.5, WHOLE))
    assert recovery_time(11, 100.0, seen) == pytest.approx(12.5)


def test_a_pool_never_whole_again_has_no_recovery() -> None:
    assert recovery_time(11, 100.0, looks((101.0, SHORT_11), (120.0, SHORT_11))) is None


def test_a_short_look_before_the_fault_is_not_the_fault_s() -> None:
    assert recovery_time(11, 100.0, looks((99.0, SHORT_11), (100.5, WHOLE))) == 0.0


def swinging(leak_per_second: float, spike_at: float | None = None) -> list[dict[str, float]]:
    """Samples whose figure follows the runners in use, which swing, plus a leak over time."""
    samples = []
    for t in range(600):
        used = 30 + (25 if t % 37 < 6 else 0) - (20 if t % 53 < 4 else 0)
        value = 1000 + 10 * used + leak_per_second * t
        if spike_at is not None and abs(t - spike_at) < 3:
            value += 2000
        samples.append({"t": float(t), "used": float(used), "tasks": value})
    return samples


def test_a_swinging_load_is_no_drift() -> None:
    assert abs(drift(swinging(0.0), "tasks", 120, 600)) < 0.001


def test_a_leak_at_equal_load_is_drift() -> None:
    # 1 a second over 479 s, against a level of 1000 + 10 * ~30 at minute 2.
    assert drift(swinging(1.0), "tasks", 120, 600) == pytest.approx(479 / 1420, rel=0.05)


def test_the_median_regression_weighs_a_spike_less() -> None:
    spiked = swinging(0.0, spike_at=590)
    assert abs(drift(spiked, "tasks", 120, 600, robust=True)) < abs(drift(spiked, "tasks", 120, 600))
    assert abs(drift(spiked, "tasks", 120, 600, robust=True)) < 0.01


def test_too_few_samples_give_no_figure_so_the_check_fails() -> None:
    assert math.isnan(drift(swinging(0.0)[:123], "tasks", 120, 600))


def test_executions_are_a_rate_by_outcome_in_bins() -> None:
    lives = [
        {"end": 0.5, "outcome": "exit"},
        {"end": 4.9, "outcome": "exit"},
        {"end": 5.0, "outcome": "error"},
        {"end": 12.0, "outcome": "exit"},
    ]
    starts, rates = execution_rates(lives, every=5.0)
    assert starts == [0.0, 5.0, 10.0]
    assert rates == {"exit": [0.4, 0.0, 0.2], "error": [0.0, 0.2, 0.0]}
    assert execution_rates([]) == ([], {})


def test_restarts_of_every_agent_are_outages_merged_where_they_overlap() -> None:
    faults = [
        {"t": 10.0, "kind": "all_agents"},
        {"t": 11.0, "kind": "all_agents"},
        {"t": 12.0, "kind": "agent"},
        {"t": 20.0, "kind": "all_agents"},
    ]
    assert outages(faults, 2.2) == [(10.0, 13.2), (20.0, 22.2)]


def test_a_recovery_less_its_outages_counts_only_their_part_inside_it() -> None:
    stretches = [(95.0, 97.0), (101.0, 103.0), (108.0, 110.0), (120.0, 122.0)]
    # From 100 to 109: 2 s of the second and 1 s of the third fall inside.
    assert outside_outages(100.0, 9.0, stretches) == pytest.approx(6.0)
    assert outside_outages(100.0, 0.0, stretches) == 0.0


def test_looks_at_the_window_s_edges() -> None:
    # A look at the very moment of the fault is before it; one 10 s after is inside the window.
    assert recovery_time(11, 100.0, looks((100.0, SHORT_11), (101.0, WHOLE))) == 0.0
    assert recovery_time(11, 100.0, looks((110.0, SHORT_11), (110.5, WHOLE))) == pytest.approx(10.5)


def test_the_rates_are_steps_that_end_one_bin_past_the_last() -> None:
    edges, outcomes, series = rate_steps([0.0, 5.0, 10.0], {"exit": [1.0, 2.0, 3.0], "none": [0.0, 0.2, 0.0]})
    assert edges == [0.0, 5.0, 10.0, 15.0]
    assert outcomes == ["exit", "timeout", "error", "none"]  # no terminal message: drawn, not dropped
    assert series == [[1.0, 2.0, 3.0, 3.0], [0.0] * 4, [0.0] * 4, [0.0, 0.2, 0.0, 0.0]]


def test_the_soak_s_picture_is_drawn(tmp_path: Path) -> None:
    path = tmp_path / "soak.png"
    draw_soak(
        path,
        title="soak",
        samples=[{"t": 0.0, "stream": "up"}, {"t": 1.0, "stream": "down"}, {"t": 2.0, "stream": "up"}],
        pools={"10": [(0.0, 30), (1.0, 12), (2.0, 30)]},
        strength=30,
        faults=[{"t": 0.5, "kind": "agent", "from": 0.5, "short": True}],
        kinds=("server", "agent"),
        rates=execution_rates([{"end": 1.5, "outcome": "exit"}, {"end": 7.0, "outcome": "none"}]),
        invariants={"pools_at_strength_within_10_s": {"ok": False, "value": 1, "limit": 0}},
    )
    assert path.read_bytes().startswith(b"\x89PNG")


def test_a_window_of_faults_is_replayed_by_kind_and_a_kind_that_does_not_exist_is_refused() -> None:
    assert fault_kinds("node_down, all_agents,none") == ["node_down", "all_agents", "none"]
    with pytest.raises(argparse.ArgumentTypeError, match="no such kind of fault: agents, nodes"):
        fault_kinds("node_down,nodes,agents")
    assert fault_kinds("agent,") == ["agent"]
    with pytest.raises(argparse.ArgumentTypeError, match="no kind of fault given"):
        fault_kinds(" , ")
