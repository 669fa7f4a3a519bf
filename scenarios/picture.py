"""A scenario's picture: what happened, at a glance (matplotlib; PNG, or SVG by the file's suffix).

Top: the pool's idle and used runners over time, the event stream's state as bands behind them
(down red, recovering amber), and every event of the timeline (a fault, a restart) as a marked
line. Bottom: every execution as a bar from its start to its end, coloured by how it ended. The
invariants, each ok or FAILED with its value, are the title's second line.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Final

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt

__all__ = ["draw"]

_STREAM_COLOURS: Final = {"down": "#cf222e", "recovering": "#d4a72c"}
_OUTCOME_COLOURS: Final = {"exit": "#1a7f37", "timeout": "#d4a72c", "error": "#cf222e"}


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
    failed = [name for name, entry in invariants.items() if not entry["ok"]]
    verdict = f"FAILED: {', '.join(failed)}" if failed else f"all {len(invariants)} invariants held"
    figure.suptitle(f"{title}\n{verdict}", color="#cf222e" if failed else "#1a7f37")
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
