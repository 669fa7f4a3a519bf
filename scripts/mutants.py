"""Switch each safety mechanism off, one at a time, and see whether the checks notice.

    python scripts/mutants.py [NAME ...] [--seeds 1-100] [--jobs 1] [--first] [--baseline]
                              [--no-scenario] [--no-simulation] [--output DIR]
    python scripts/mutants.py --check

For each mutant of ``scripts/mutant_catalogue.py`` (or those named), the project's package and
scenarios are copied to a scratch directory, the mutant's patch is applied there, and the copy runs
(a) the deterministic simulation over the seeds (``scenarios/dst.py``) and (b) the mutant's own
scenario at full size. Per mutant it prints the first seed that fails and how many of the range fail
(``--first`` stops each mutant's simulation at its first failing seed, so "how many" is then 1),
the promises broken at that first seed, and the scenario's verdict: ``ok``, the first invariant that
failed, ``crashed`` (no report) or ``none`` (no scenario tells the mechanism's story). A seed that
prints nothing for ``--seed-timeout`` seconds is a failure of its own (``hung``). The full output of
every run is kept under ``--output``: ``NAME-dst.log`` (and its pictures in ``NAME-dst/``),
``NAME-scenario.log`` and ``NAME-scenario.json``. With ``--baseline`` the unmutated code runs the
seeds first (``unmutated-dst.log``), and each mutant says at how many seeds its trace hash is the
unmutated one's: there the mechanism switched off changed nothing the simulation records. It ends
with a markdown table and exits 0 only if the simulation and the scenario both killed every mutant.

``--check`` only applies every patch to a scratch copy and byte-compiles it: a patch whose old text
is not in its file exactly once fails, so the catalogue cannot drift from the code unseen.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

from mutant_catalogue import MUTANTS, CatalogueDrift, Mutant, apply, by_name

ROOT: Final = Path(__file__).resolve().parents[1]
# What the runs need of the project: the package and the scenarios (which put the copy's root on
# their path, or are given it on PYTHONPATH, so the copy's package is the one imported).
_COPIED: Final = ("supervisor", "scenarios")
_SEED_LINE: Final = re.compile(r"^seed +(\d+) .* (PASS|FAIL \(\d+\)) +trace ([0-9a-f]+) ")
_BROKE_LINE: Final = re.compile(r"^    broke (.+?) at ([\d.]+) s: (.*)$")
_REPLAY_LINE: Final = "    replay: "
_SUMMARY_LINE: Final = re.compile(r"^\d+ seeds, \d+ failed, in \d+ s")
# After a failing seed's replay line, its picture and last log lines follow within this long.
_REPORT_TAIL: Final = 5.0


@dataclass
class SimulationVerdict:
    """What the simulation made of a mutant over its seeds."""

    seeds: list[int]
    ran: int = 0
    failed: list[int] = field(default_factory=list)
    # The promises broken at the first failing seed (each once, in order).
    broken: list[str] = field(default_factory=list)
    hung: int | None = None
    crashed: bool = False
    seconds: float = 0.0
    # Each seed's trace hash: a mutant's equal to the unmutated code's did nothing that seed.
    hashes: dict[int, str] = field(default_factory=dict)

    @property
    def killed(self) -> bool:
        return bool(self.failed) or self.hung is not None or self.crashed

    def describe(self) -> str:
        if self.hung is not None:
            return f"seed {self.hung} hung (no line in time)"
        if self.failed:
            return f"first fails at seed {self.failed[0]}; {len(self.failed)} of {self.ran} seeds run fail"
        if self.crashed:
            return f"crashed after {self.ran} seeds"
        return f"survived {_span(self.seeds[: self.ran])}"


@dataclass
class ScenarioVerdict:
    """What the mutant's scenario made of it: ``ok``, its first failed invariant, or why none."""

    cell: str
    seconds: float = 0.0

    @property
    def killed(self) -> bool:
        return self.cell not in ("ok", "none", "not run")


def _span(seeds: list[int]) -> str:
    if not seeds:
        return "no seed"
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])


def seed_range(text: str) -> list[int]:
    """``1-100``, ``5``, or ``1,2,7-9`` (as ``scenarios/dst.py`` reads them)."""
    chosen: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        try:
            chosen += list(range(int(first), int(last or first) + 1))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: a seed is a number, a range is FIRST-LAST") from None
    return chosen


@contextmanager
def mutated_copy(mutant: Mutant | None) -> Iterator[Path]:
    """A scratch copy of what the runs need, with ``mutant`` applied (none: as it is)."""
    with tempfile.TemporaryDirectory(prefix="mutant-") as scratch:
        root = Path(scratch)
        for name in _COPIED:
            shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        if mutant is not None:
            apply(mutant, root)
        yield root


def _environment(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy)
    env["PYTHONUNBUFFERED"] = "1"  # a failing seed's report is read as it is printed
    return env


def check() -> int:
    """Apply every mutant to a scratch copy of its own and byte-compile the copy."""
    failed = 0
    for mutant in MUTANTS:
        try:
            with mutated_copy(mutant) as copy:
                compiled = compileall.compile_dir(copy / "supervisor", quiet=2, workers=1)
        except CatalogueDrift as exc:
            print(f"{mutant.name:<32} DRIFT  {exc}")
            failed += 1
            continue
        print(f"{mutant.name:<32} {'ok' if compiled else 'does not compile'}")
        failed += not compiled
    print(f"{len(MUTANTS)} mutants, {failed} that do not apply or compile")
    return 1 if failed else 0


def _lines(stream: IO[str], into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def run_simulation(
    copy: Path, seeds: list[int], *, jobs: int, first: bool, seed_timeout: float, log: Path, pictures: Path
) -> SimulationVerdict:
    """``scenarios/dst.py`` in the copy over ``seeds``, its output kept in ``log``."""
    verdict = SimulationVerdict(seeds)
    started = time.perf_counter()
    argv = [sys.executable, "scenarios/dst.py", "--seeds", ",".join(map(str, seeds))]
    argv += ["--jobs", str(jobs), "--output", str(pictures)]
    with log.open("w") as out:
        process = subprocess.Popen(
            argv,
            cwd=copy,
            env=_environment(copy),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its workers are ended with it
        )
        assert process.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True)
        reader.start()
        reading_failure = False
        tail_until: float | None = None
        ended = False
        while True:
            timeout = seed_timeout if tail_until is None else max(0.0, tail_until - time.perf_counter())
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                if tail_until is None:
                    verdict.hung = seeds[verdict.ran] if verdict.ran < len(seeds) else seeds[-1]
                    out.write(f"# no line for {seed_timeout:g} s: seed {verdict.hung} hung\n")
                break
            if line is None:
                ended = True
                break
            out.write(line)
            out.flush()
            seed = _SEED_LINE.match(line)
            if tail_until is not None and (seed or _SUMMARY_LINE.match(line)):
                break  # a failing seed's report has ended: --first stops here
            if seed:
                verdict.ran += 1
                verdict.hashes[int(seed.group(1))] = seed.group(3)
                reading_failure = seed.group(2) != "PASS"
                if reading_failure:
                    verdict.failed.append(int(seed.group(1)))
                continue
            broke = _BROKE_LINE.match(line)
            if (
                broke
                and reading_failure
                and len(verdict.failed) == 1
                and broke.group(1) not in verdict.broken
            ):
                verdict.broken.append(broke.group(1))
            if first and reading_failure and line.startswith(_REPLAY_LINE):
                tail_until = time.perf_counter() + _REPORT_TAIL
        if not ended:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        code = process.wait()
        reader.join(timeout=_REPORT_TAIL)  # killed, the pipe ends: the reader sees its end
        process.stdout.close()
        if ended and code != 0 and not verdict.failed and verdict.hung is None:
            verdict.crashed = True
    verdict.seconds = time.perf_counter() - started
    return verdict


def run_scenario(copy: Path, mutant: Mutant, *, seed: int, timeout: float, output: Path) -> ScenarioVerdict:
    """The mutant's scenario at full size in the copy (``scenarios/run_all.py``'s verdicts)."""
    if mutant.scenario is None:
        return ScenarioVerdict("none")
    started = time.perf_counter()
    report = output / f"{mutant.name}-scenario.json"
    report.unlink(missing_ok=True)
    argv = [sys.executable, f"scenarios/{mutant.scenario}.py", *mutant.arguments]
    argv += ["--seed", str(seed), "--report", str(report)]
    with (output / f"{mutant.name}-scenario.log").open("wb") as log:
        process = subprocess.Popen(
            argv,
            cwd=copy,
            env=_environment(copy),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return ScenarioVerdict(f"timed out ({timeout:g} s)", time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if not report.exists():
        return ScenarioVerdict("crashed", seconds)
    failed = [k for k, v in json.loads(report.read_text())["invariants"].items() if not v["ok"]]
    if code == 0 and not failed:
        return ScenarioVerdict("ok", seconds)
    return ScenarioVerdict(failed[0] if failed else f"exit {code}", seconds)


def _scenario_command(mutant: Mutant) -> str:
    if mutant.scenario is None:
        return "none"
    return " ".join([mutant.scenario, *mutant.arguments])


def unchanged(simulation: SimulationVerdict, baseline: SimulationVerdict) -> str:
    """At how many of the seeds both ran the mutant's trace is the unmutated code's, bit for bit:
    there, the mechanism switched off changed nothing the simulation records."""
    both = [seed for seed in simulation.hashes if seed in baseline.hashes]
    same = sum(simulation.hashes[seed] == baseline.hashes[seed] for seed in both)
    return f"{same} of {len(both)}"


def table(
    results: list[tuple[Mutant, SimulationVerdict, ScenarioVerdict]],
    baseline: SimulationVerdict | None = None,
) -> str:
    """The markdown table of every mutant's verdicts (with ``baseline``: at how many seeds each
    mutant's trace was the unmutated code's)."""
    rows = [
        "| mechanism switched off | patch | simulation | promises broken at the first failing seed | "
        "scenario | scenario's verdict | wall time |" + (" traces as unmutated |" if baseline else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if baseline else ""),
    ]
    for mutant, simulation, scenario in results:
        files = ", ".join(sorted({r.path for r in mutant.replacements}))
        promises = "; ".join(simulation.broken) or "—"
        wall = f"{simulation.seconds:.0f} s + {scenario.seconds:.0f} s"
        rows.append(
            f"| `{mutant.name}` | `{files}`: {mutant.patch} | {simulation.describe()} | {promises} | "
            f"`{_scenario_command(mutant)}` | {scenario.cell} | {wall} |"
            + (f" {unchanged(simulation, baseline)} |" if baseline else "")
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--check", action="store_true", help="only apply and byte-compile every patch")
    parser.add_argument("--seeds", type=seed_range, default=seed_range("1-100"), help="[1-100]")
    parser.add_argument("--jobs", type=int, default=1, help="the simulation's processes [1]")
    parser.add_argument("--first", action="store_true", help="stop each simulation at its first failing seed")
    parser.add_argument("--no-scenario", action="store_true", help="run the simulation only")
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="first run the unmutated code over the seeds, and say where each mutant's trace is its",
    )
    parser.add_argument("--no-simulation", action="store_true", help="run the scenario only")
    parser.add_argument("--scenario-seed", type=int, default=1, help="[1]")
    parser.add_argument(
        "--seed-timeout", type=float, default=300.0, help="seconds a seed may print nothing [300]"
    )
    parser.add_argument("--scenario-timeout", type=float, default=1800.0, help="[1800]")
    parser.add_argument("--output", type=Path, default=Path("mutant-runs"), help="[mutant-runs]")
    args = parser.parse_args()
    if args.check:
        return check()
    try:
        chosen = by_name(args.names) if args.names else list(MUTANTS)
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    args.output.mkdir(parents=True, exist_ok=True)
    output = args.output.resolve()
    results: list[tuple[Mutant, SimulationVerdict, ScenarioVerdict]] = []
    baseline = None
    if args.baseline:
        with mutated_copy(None) as copy:
            baseline = run_simulation(
                copy,
                args.seeds,
                jobs=args.jobs,
                first=False,
                seed_timeout=args.seed_timeout,
                log=output / "unmutated-dst.log",
                pictures=output / "unmutated-dst",
            )
        print(f"== unmutated: {baseline.describe()} ({baseline.seconds:.0f} s)", flush=True)
    for mutant in chosen:
        print(f"== {mutant.name}: {mutant.patch}", flush=True)
        with mutated_copy(mutant) as copy:
            simulation = SimulationVerdict(args.seeds)
            if not args.no_simulation:
                simulation = run_simulation(
                    copy,
                    args.seeds,
                    jobs=args.jobs,
                    first=args.first,
                    seed_timeout=args.seed_timeout,
                    log=output / f"{mutant.name}-dst.log",
                    pictures=output / f"{mutant.name}-dst",
                )
                same = f"; traces as unmutated: {unchanged(simulation, baseline)}" if baseline else ""
                print(
                    f"   simulation: {simulation.describe()} ({simulation.seconds:.0f} s){same}", flush=True
                )
                for promise in simulation.broken:
                    print(f"     broke {promise}", flush=True)
            scenario = ScenarioVerdict("not run")
            if not args.no_scenario:
                scenario = run_scenario(
                    copy, mutant, seed=args.scenario_seed, timeout=args.scenario_timeout, output=output
                )
                print(
                    f"   scenario {_scenario_command(mutant)}: {scenario.cell} ({scenario.seconds:.0f} s)",
                    flush=True,
                )
        results.append((mutant, simulation, scenario))
    print(table(results, baseline))
    survivors = [m.name for m, sim, scen in results if not (sim.killed and scen.killed)]
    if survivors:
        print(f"mutants not killed by both: {', '.join(survivors)} (of {len(results)})")
    else:
        print(f"every mutant was killed by the simulation and its scenario ({len(results)} mutants)")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
