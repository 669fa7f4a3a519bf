"""The chaos soak's figures, from what it recorded: each pool's recovery after a fault, the drift
of the daemon's resources at equal load, and the summaries it prints beside its invariants."""

from __future__ import annotations

import math
from typing import Any, Final

# Each pool must be at strength again this long after each fault.
RECOVERY_WITHIN: Final = 10.0


def metric(text: str, name: str) -> float:
    """The value of an unlabelled metric in Prometheus' text format (0 if absent)."""
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")), 0.0)


def drift(
    samples: list[dict[str, Any]],
    key: str,
    since: float,
    until: float,
    *,
    robust: bool = False,
    load: tuple[str, ...] = ("used",),
) -> float:
    """How much ``key`` drifts from ``since`` to ``until`` (the load's end: after it the daemon
    idles, which is no drift), at a constant load, relative to its level at ``since``. The figures
    follow the load (each running execution holds tasks, sockets, buffers), which a fault every few
    seconds makes swing; so the samples are fitted with ``key = a + b * used + c * t`` (``used``
    the runners in use; ``load`` names the samples' figures of the load), and the drift is ``c``
    over the span: a leak shows as a rise at equal load, a swing of the load does not. The fit is
    least squares, or with ``robust`` a median regression (least absolute deviations), on which the
    few seconds in which a fault's clean-up spikes a figure weigh less; a leak, which raises every
    sample after it, shows in both."""
    inside = [s for s in samples if since <= s["t"] <= until]
    varying = [name for name in load if len({s[name] for s in inside}) > 1]  # a constant tells nothing
    window = [(1.0, *(float(s[name]) for name in varying), s["t"], float(s[key])) for s in inside]
    if len(window) < 4:
        return math.nan  # no figure: the check fails rather than pass on nothing
    fit = _least_squares(window, [1.0] * len(window))
    for _ in range(49 if robust else 0):  # iteratively reweighted least squares
        if fit is None:
            break
        residuals = [row[-1] - sum(k * x for k, x in zip(fit, row, strict=False)) for row in window]
        fit = _least_squares(window, [1.0 / max(abs(r), 1e-3) for r in residuals])
    if fit is None:
        return math.nan
    span = window[-1][-2] - window[0][-2]
    means = [sum(row[i] for row in window) / len(window) for i in range(len(fit) - 1)]
    level = sum(k * mean for k, mean in zip(fit, means, strict=False)) + fit[-1] * window[0][-2]
    return fit[-1] * span / level if level else 0.0


def _least_squares(rows: list[tuple[float, ...]], weights: list[float]) -> list[float] | None:
    """The coefficients ``k`` of ``y = k[0]*x[0] + k[1]*x[1] + ...`` that fit ``rows`` of
    (x[0], x[1], ..., y) best, each row's squared error weighted (None if they do not tell)."""
    n = len(rows[0]) - 1
    m = [
        [sum(w * r[i] * r[j] for r, w in zip(rows, weights, strict=True)) for j in range(n)]
        + [sum(w * r[i] * r[n] for r, w in zip(rows, weights, strict=True))]
        for i in range(n)
    ]
    for col in range(n):  # Gauss-Jordan elimination with partial pivoting
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if abs(m[col][col]) < 1e-12:
            return None
        for r in range(n):
            if r != col:
                factor = m[r][col] / m[col][col]
                m[r] = [x - factor * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def recovery_time(environment: int, hits: float, looks: list[tuple[float, frozenset[int]]]) -> float | None:
    """Seconds from ``hits`` until the pool was whole at a look after its first look short in the
    window (a look taken before the daemon had seen a loss is no recovery); 0 for a pool never short
    in the window (not hit), None for one never whole again."""
    window = [(t, whole) for t, whole in looks if hits < t <= hits + RECOVERY_WITHIN]
    short = next((t for t, whole in window if environment not in whole), None)
    if short is None:
        return 0.0
    back = next((t for t, whole in looks if t > short and environment in whole), None)
    return None if back is None else back - hits


def refill(
    samples: list[dict[str, Any]], load_ended: float, start_seconds: dict[str, float], most: int
) -> None:
    """What bounds the refill: how long the daemon's runners took to start, and how often its
    factory had ``factory.max_starting`` of them starting (so that more had to wait)."""
    loaded = [s for s in samples if s["t"] <= load_ended]
    held = sum(s["factory_starting"] >= most for s in loaded)
    starts = start_seconds.get("+Inf", 0)
    if starts:
        shares = ", ".join(
            f"<= {bound} s {start_seconds[bound] / starts:.0%}" for bound in ("0.5", "1", "2.5", "10")
        )
        print(f"  runner starts (registration to running): {starts:,.0f}; {shares}")
    if loaded:
        share = held / len(loaded)
        print(f"  the factory at max_starting ({most}): {share:.0%} of the load's samples")


def by_kind(faults: list[dict[str, Any]], blind_window: float) -> None:
    """Each kind's recoveries (the slowest pool each fault hit), and how the faults that left a pool
    short fall inside and outside the windows in which Nomad does not yet know a node is down."""
    slowest: dict[str, list[float]] = {}
    inside = [0, 0]
    outside = [0, 0]
    for fault in faults:
        times = list(fault["recovery_s"].values())
        worst = math.inf if None in times else max(times)
        slowest.setdefault(fault["kind"], []).append(worst)
        blind = any(
            other["kind"] == "node_down" and 0 <= fault["t"] - other["t"] <= blind_window for other in faults
        )
        tally = inside if blind else outside
        tally[0] += worst > RECOVERY_WITHIN
        tally[1] += 1
    kinds = sorted(slowest.items(), key=lambda item: sorted(item[1])[len(item[1]) // 2])
    print(
        "  by kind, the slowest pool hit (median; faults with a pool short after 10 s): "
        + ", ".join(
            f"{kind} {sorted(times)[len(times) // 2]:.1f} s ({sum(t > RECOVERY_WITHIN for t in times)} "
            f"of {len(times)})"
            for kind, times in kinds
        )
    )
    print(
        f"  faults with a pool short after 10 s: {inside[0]} of the {inside[1]} within "
        f"{blind_window:g} s of a node down's start (Nomad still places work on its away agent), "
        f"{outside[0]} of the {outside[1]} others"
    )


def outages(faults: list[dict[str, Any]], lasting: float) -> list[tuple[float, float]]:
    """The stretches in which no agent could start a runner: from each restart of every agent, for
    ``lasting`` seconds (its downtime and the agents' registration), overlaps merged."""
    merged: list[tuple[float, float]] = []
    for start in sorted(f["t"] for f in faults if f["kind"] == "all_agents"):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], start + lasting))
        else:
            merged.append((start, start + lasting))
    return merged


def outside_outages(hits: float, recovery: float, stretches: list[tuple[float, float]]) -> float:
    """``recovery`` seconds from ``hits``, less those that fall in ``stretches``."""
    end = hits + recovery
    return recovery - sum(max(0.0, min(end, b) - max(hits, a)) for a, b in stretches)


def execution_rates(
    lives: list[dict[str, Any]], every: float = 5.0
) -> tuple[list[float], dict[str, list[float]]]:
    """The executions that ended each second, averaged over bins of ``every`` seconds from 0, by
    outcome: (each bin's start, outcome -> its rate in each bin)."""
    if not lives:
        return [], {}
    bins = int(max(life["end"] for life in lives) // every) + 1
    rates: dict[str, list[float]] = {}
    for life in lives:
        rates.setdefault(life["outcome"], [0.0] * bins)[int(life["end"] // every)] += 1 / every
    return [i * every for i in range(bins)], rates
