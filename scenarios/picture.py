"""A scenario's picture: what happened, at a glance (matplotlib; PNG, or SVG by the file's suffix).

Top: the pool's idle and used runners over time, the event stream's state as bands behind them
(down red, recovering amber), and every event of the timeline (a fault, a restart) as a marked
line. Bottom: every execution as a bar from its start to its end, coloured by how it ended. The
invariants, each ok or FAILED with its value, are the title's second line.

The chaos soak's picture (``draw_soak``) is drawn for minutes of load, where a bar per execution
and a line per fault would be a blur: each pool's idle runners against its strength, the stream's
state as the same bands, each fault as a marker coloured by its kind (and a cross where the rule's
time began, after which a pool was still short), and the executions as a rate, stacked by how
they ended.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Final

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt

__all__ = ["draw", "draw_soak", "rate_steps"]

_STREAM_COLOURS: Final = {"down": "#cf222e", "recovering": "#d4a72c"}
_OUTCOME_COLOURS: Final = {"exit": "#1a7f37", "timeout": "#d4a72c", "error": "#cf222e"}
_POOL_COLOURS: Final = ("#0969da", "#8250df", "#bf3989", "#1b7c83", "#9a6700")


def draw(
    path: Path,
    *,
    title: str,
    samples: list[dict[str, Any]],
    timeline: list[dict[str, Any]],
    lives: list[dict[str, Any]],
    invariants: dict[str, dict[str, Any]],
) -> None:
    """Write the picture to ``path``."""
    figure, (pool, runs) = plt.subplots(
        2, 1, figsize=(12, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    _title(figure, title, invariants)
    _pool_and_stream(pool, samples)
    for entry in timeline:
        for axis in (pool, runs):
            axis.axvline(entry["t"], color="#57606a", linestyle=":", linewidth=0.8)
        details = {k: v for k, v in entry.items() if k not in ("t", "event")}
        pool.annotate(
            entry["event"] + (f" {json.dumps(details)[:40]}" if details else ""),
            (entry["t"], 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            fontsize=7,
            va="top",
            ha="right",
        )
    _executions(runs, lives)
    runs.set_xlabel("seconds")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_soak(
    path: Path,
    *,
    title: str,
    samples: list[dict[str, Any]],
    pools: dict[str, list[tuple[float, int]]],
    strength: int,
    faults: list[dict[str, Any]],
    kinds: tuple[str, ...],
    rates: tuple[list[float], dict[str, list[float]]],
    invariants: dict[str, dict[str, Any]],
) -> None:
    """Write the soak's picture to ``path``: ``pools`` maps each environment to its (t, idle
    runners); ``faults`` holds each fault's t and kind, ``short`` if a pool was still short after
    the rule's time, and ``from``, when that time began (a node down's, at the end of its heartbeat
    grace), where the cross goes; ``kinds`` orders the kinds, so each keeps its colour from run to
    run; ``rates`` the executions ended per second by outcome, each bin from its start to the
    next."""
    figure, (pool, runs) = plt.subplots(
        2, 1, figsize=(13, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    _title(figure, title, invariants)
    for (environment, series), colour in zip(sorted(pools.items()), itertools.cycle(_POOL_COLOURS)):
        pool.plot(
            [t for t, _ in series],
            [idle for _, idle in series],
            color=colour,
            linewidth=1,
            label=f"environment {environment}: idle runners",
        )
    pool.axhline(strength, color="#57606a", linestyle="--", linewidth=0.8, label=f"strength ({strength})")
    for start, end, state in _bands(samples):
        pool.axvspan(start, end, color=_STREAM_COLOURS[state], alpha=0.15, linewidth=0)
    for state, colour in _STREAM_COLOURS.items():
        pool.fill_between([], [], color=colour, alpha=0.15, label=f"event stream {state}")
    pool.set_ylim(0, strength * 1.3)
    pool.set_ylabel("idle runners")
    pool.add_artist(pool.legend(loc="lower left", fontsize=7, ncol=3))
    pool.legend_ = None  # kept as an artist: the faults' legend is the axis' own
    _fault_markers(pool, faults, kinds, at=strength * 1.18)
    starts, by_outcome = rates
    if starts:
        edges, outcomes, steps = rate_steps(starts, by_outcome)
        runs.stackplot(
            edges,
            *steps,
            labels=outcomes,
            colors=[_OUTCOME_COLOURS.get(o, "#57606a") for o in outcomes],
            step="post",
        )
    runs.set_ylabel("executions ended / s")
    runs.set_xlabel("seconds")
    runs.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def rate_steps(
    starts: list[float], by_outcome: dict[str, list[float]]
) -> tuple[list[float], list[str], list[list[float]]]:
    """The rates as steps: each bin's start and one edge past the last (a step is drawn to the next
    edge), the outcomes in the legend's order (the known ones first, then any other, such as an
    execution that got no terminal message), and each outcome's rates with the last repeated."""
    edges = [*starts, starts[-1] + (starts[-1] - starts[-2] if len(starts) > 1 else 1.0)]
    outcomes = [*_OUTCOME_COLOURS, *sorted(set(by_outcome) - set(_OUTCOME_COLOURS))]
    series = []
    for outcome in outcomes:
        rates = by_outcome.get(outcome, [0.0] * len(starts))
        series.append([*rates, rates[-1]])
    return edges, outcomes, series


def _fault_markers(axis: Any, faults: list[dict[str, Any]], kinds: tuple[str, ...], *, at: float) -> None:
    """Each fault as a marker at height ``at``, coloured by its kind, with a legend of the kinds
    that came; a cross where the time began after which a pool was still short."""
    markers = []
    palette = plt.get_cmap("tab10")
    for index, kind in enumerate(kinds):
        times = [fault["t"] for fault in faults if fault["kind"] == kind]
        if times:
            colour = palette(index % palette.N)
            markers.append(axis.scatter(times, [at] * len(times), marker="v", s=22, color=colour, label=kind))
    short = [fault.get("from", fault["t"]) for fault in faults if fault.get("short")]
    if short:
        markers.append(
            axis.scatter(
                short, [at] * len(short), marker="x", s=70, color="#cf222e", label="pool short after"
            )
        )
    if markers:
        axis.legend(handles=markers, loc="upper center", fontsize=7, ncol=len(markers), frameon=False)


def _title(figure: Any, title: str, invariants: dict[str, dict[str, Any]]) -> None:
    failed = [name for name, entry in invariants.items() if not entry["ok"]]
    verdict = f"FAILED: {', '.join(failed)}" if failed else f"all {len(invariants)} invariants held"
    figure.suptitle(f"{title}\n{verdict}", color="#cf222e" if failed else "#1a7f37")


def _pool_and_stream(axis: Any, samples: list[dict[str, Any]]) -> None:
    times = [s["t"] for s in samples]
    axis.plot(times, [s["idle"] for s in samples], label="idle runners", color="#0969da")
    axis.plot(times, [s["used"] for s in samples], label="used runners", color="#8250df")
    for start, end, state in _bands(samples):
        axis.axvspan(start, end, color=_STREAM_COLOURS[state], alpha=0.15, linewidth=0)
    axis.set_ylabel("runners")
    axis.legend(loc="lower left", fontsize=8)


def _bands(samples: list[dict[str, Any]]) -> list[tuple[float, float, str]]:
    """Stretches of samples whose stream state is not up: (start, end, state)."""
    bands: list[tuple[float, float, str]] = []
    for before, after in itertools.pairwise(samples):
        state = before["stream"]
        if state in _STREAM_COLOURS:
            if bands and bands[-1][2] == state and bands[-1][1] == before["t"]:
                bands[-1] = (bands[-1][0], after["t"], state)
            else:
                bands.append((before["t"], after["t"], state))
    return bands


def _executions(axis: Any, lives: list[dict[str, Any]]) -> None:
    for row, life in enumerate(sorted(lives, key=lambda life: life["start"])):
        colour = _OUTCOME_COLOURS.get(life["outcome"], "#57606a")
        axis.plot([life["start"], life["end"]], [row, row], color=colour, linewidth=2)
    for outcome, colour in _OUTCOME_COLOURS.items():
        axis.plot([], [], color=colour, linewidth=2, label=outcome)
    axis.set_ylabel("executions")
    axis.legend(loc="upper left", fontsize=8)
