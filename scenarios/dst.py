"""Deterministic simulation: for each seed, the daemon and a random simulated cluster in one trio run
on virtual time, under a random fault schedule and a CodeOcean-like load, every promise checked as
the run goes.

    python scenarios/dst.py --seeds 1-1000 [--minutes 5] [--jobs 2]
    python scenarios/dst.py --seeds 17 --trace        # replay one seed, with its full trace

Each seed prints one line: seed, virtual minutes, claims, executions, faults, result, trace hash,
wall time. A failing seed prints each promise it broke, when, the command that replays it, and
writes its timeline picture (dst-<seed>.svg) and, with --trace, its trace (dst-<seed>.trace).
Exits 0 only if every seed passed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loguru import logger

from supervisor.dst.run import Result, run_seed

# Sets and dicts of strings iterate in an order that follows the hash seed: a replay must fix it.
_HASH_SEED = "0"


def seeds(text: str) -> list[int]:
    """``1-1000``, ``5``, or ``1,2,7-9``."""
    chosen: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        try:
            chosen += list(range(int(first), int(last or first) + 1))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: a seed is a number, a range is FIRST-LAST") from None
    return chosen


def _one(seed: int, minutes: float, trace: bool) -> Result:
    logger.remove()
    result = run_seed(seed, minutes=minutes, keep_trace=trace)
    if result.passed and not trace:
        result.timeline = None  # nothing to draw: keep what crosses the process boundary small
        result.log_lines = []
    return result


def _line(result: Result) -> str:
    verdict = "PASS" if result.passed else f"FAIL ({len(result.violations)})"
    return (
        f"seed {result.seed:>5}  {result.minutes:g} min  claims {result.claims:>4}  "
        f"executions {result.executions:>4}  faults {result.faults:>2}  {verdict:<9}  "
        f"trace {result.trace_hash[:16]}  {result.wall_seconds:5.1f} s"
    )


def _report_failure(result: Result, minutes: float, output: Path) -> None:
    for violation in result.violations[:20]:
        print(f"    broke {violation.promise} at {violation.at:.3f} s: {violation.details}")
    print(f"    faults: {'; '.join(f'{f.at:.1f} {f.describe()}' for f in result.plan.faults)}")
    print(f"    cluster: {result.plan.describe()}")
    print(f"    replay: python scenarios/dst.py --seeds {result.seed} --minutes {minutes:g} --trace")
    if result.timeline is not None:
        picture = output / f"dst-{result.seed}.svg"
        title = f"seed {result.seed}: {result.violations[0].promise}"
        picture.write_text(result.timeline.svg(title, result.violations))
        print(f"    timeline: {picture}")
    for line in result.log_lines[-15:]:
        print(f"      | {line}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=seeds, default=seeds("1-10"), help="seeds, e.g. 1-1000 or 3,7 [1-10]")
    parser.add_argument("--minutes", type=float, default=5.0, help="virtual minutes per seed [5]")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once, in processes [1]")
    parser.add_argument("--trace", action="store_true", help="write each seed's full trace and log")
    parser.add_argument("--output", type=Path, default=Path("."), help="where pictures and traces go [.]")
    args = parser.parse_args()
    if args.minutes < 3:
        parser.error("--minutes: at least 3 (the last 90 virtual seconds are the quiet period)")
    if os.environ.get("PYTHONHASHSEED") != _HASH_SEED:
        os.environ["PYTHONHASHSEED"] = _HASH_SEED
        os.execv(sys.executable, [sys.executable, *sys.argv])
    args.output.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    failed: list[int] = []
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        runs = [pool.submit(_one, seed, args.minutes, args.trace) for seed in args.seeds]
        for run in runs:
            result = run.result()
            print(_line(result), flush=True)
            if args.trace:
                trace = args.output / f"dst-{result.seed}.trace"
                trace.write_text("".join(result.trace_lines) + "\n# log\n" + "\n".join(result.log_lines))
                print(f"    trace: {trace}")
            if not result.passed:
                failed.append(result.seed)
                _report_failure(result, args.minutes, args.output)
    wall = time.perf_counter() - started
    print(
        f"{len(args.seeds)} seeds, {len(failed)} failed, in {wall:.0f} s" + (f": {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
