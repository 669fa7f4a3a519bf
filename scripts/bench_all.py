"""Every benchmark, one after another; one table of every target; on request, the table into the docs.

    python scripts/bench_all.py [--quick] [--only NAME,NAME] [--write-docs]

Runs each benchmark of ``scripts/`` as its own process, one at a time (they measure CPU and time on
a shared machine, so two at once would measure each other), keeps its output in a directory it names,
and reads its ``TARGET`` lines (``targets.py``). ``--quick`` runs small sizes, for a look in a few
minutes; the full sizes take about half an hour. The table is printed; with ``--write-docs`` it also
replaces, with the command that produced it and the machine's core count, what stands between the
``bench_all`` markers of ``docs/benchmarks.md``. Without that flag no file is written, and the README
is never touched. Exit 0 only if every target of every benchmark passed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from targets import LINE

HERE: Final = Path(__file__).resolve().parent
DOCS: Final = HERE.parent / "docs" / "benchmarks.md"
BEGIN: Final = "<!-- bench_all: begin -->"
END: Final = "<!-- bench_all: end -->"
# name: (quick options, full options)
BENCHMARKS: Final[dict[str, tuple[list[str], list[str]]]] = {
    "bench_events": (["--events", "40000", "--repeat", "2"], []),
    "bench_decode": (["--events", "10000", "--repeat", "3"], []),
    "bench_recovery": (["--quick"], []),
    "bench_scale": (["--quick"], []),
    "bench_exec": (["--executions", "200"], []),
    "bench_relist": (["--cycles", "1000", "--history", "10000"], []),
    "bench_simulator": (["--runners", "2000", "--seconds", "3"], []),
}

Row = tuple[str, str, str, str, str]  # benchmark, target, figure, limit, verdict


def run(name: str, options: list[str], scratch: Path) -> tuple[list[Row], float]:
    """The benchmark's target rows (a crash is one row that says so) and its wall time."""
    log = scratch / f"{name}.log"
    started = time.monotonic()
    with log.open("wb") as sink:
        code = subprocess.run(
            [sys.executable, str(HERE / f"{name}.py"), *options],
            stdout=sink,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    took = time.monotonic() - started
    rows: list[Row] = []
    for line in log.read_text(errors="replace").splitlines():
        if match := LINE.match(line):
            rows.append((name, match["name"], match["figure"], match["limit"], match["verdict"]))
    if not rows or (code != 0 and all(row[4] == "PASS" for row in rows)):
        rows.append((name, "ran to its end", f"exit {code}, output in {log}", "exit 0", "FAIL"))
    return rows, took


def table(rows: list[Row]) -> list[str]:
    header: Row = ("benchmark", "target", "figure", "limit", "")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(5)]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(header, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        lines.append("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")
    return lines


def write_docs(lines: list[str], command: str, took: float, path: Path = DOCS) -> None:
    """Replace what stands between the markers of ``path`` with the table, its command and cores."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    cores = os.cpu_count()
    block = [
        BEGIN,
        f"`{command}` on {cores} cores, {took / 60:.0f} min:",
        "",
        *lines,
        END,
    ]
    path.write_text(head + "\n".join(block) + tail)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``args.chosen`` is the benchmarks to run, in their order."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--only", help="comma-separated benchmark names (default: all)")
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help=f"also write the table between the markers of {DOCS.relative_to(HERE.parent)}",
    )
    args = parser.parse_args(argv)
    args.chosen = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = [name for name in args.chosen if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    return args


def main() -> int:
    args = parse_args()
    chosen: list[str] = args.chosen
    rows: list[Row] = []
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="bench-all-"))
    print(f"each benchmark's output in {scratch}")
    for name in chosen:
        quick, full = BENCHMARKS[name]
        found, took = run(name, quick if args.quick else full, scratch)
        met = sum(row[4] == "PASS" for row in found)
        print(f"{name}: {took:.0f} s, {met} of {len(found)} targets met", flush=True)
        rows += found
    lines = table(rows)
    print("\n".join(lines))
    command = "python scripts/bench_all.py" + (" --quick" if args.quick else "")
    if args.only:
        command += f" --only {args.only}"
    if args.write_docs:
        write_docs(lines, command, time.monotonic() - started)
        print(f"the table written to {DOCS}")
    failed = sum(row[4] == "FAIL" for row in rows)
    print(f"{len(rows) - failed} of {len(rows)} targets met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
