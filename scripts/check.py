"""Every check the project has: lint, formatting, types, the systemd units as systemd reads them,
the alert rules as Prometheus reads them (with their unit tests), the wheel installed outside the
checkout running the README's walk-through, the quick scenarios, 15 seeds of the deterministic
simulation, a short fuzzing pass of the API (over its own document and Poseidon's swagger.yaml),
then the test suite.

    python scripts/check.py [pytest arguments...]

Stops at the first failing step and exits with its code; the last line sums up every step. The
scenarios run for seeds 1 and 2, six at a time (each mostly waits on its cluster's timers); seeds 3
to 5, and the simulation's seeds past 15, are `run_all.py --quick` and `dst.py --seeds` of their
own, kept out of the check so that it stays within ten minutes on two cores. The
tests run in one worker per core (pytest-xdist): the daemon tests spend most of their time waiting
on the simulated cluster's real processes, so two workers halve the wall time on two cores. ``-n 0``
runs them in one process. The monitoring step installs Debian's ``prometheus`` package when its
``promtool`` is missing and this runs as root (as CI does), since a test of the suite runs a real
Prometheus; elsewhere it fails with the command that installs it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [name for name in ("supervisor", "tests", "scripts", "scenarios") if (ROOT / name).is_dir()]


def run_steps(steps: list[tuple[str, list[str]]]) -> int:
    """Run each step until one fails; print a summary line of all; the failing step's exit code."""
    outcomes: list[str] = []
    code = 0
    for name, command in steps:
        if code != 0:
            outcomes.append(f"{name} not run")
            continue
        print(f"== {name}: {' '.join(command[2:])}", flush=True)
        started = time.monotonic()
        code = subprocess.run(command, cwd=ROOT, check=False).returncode
        took = f"{time.monotonic() - started:.0f} s"
        outcomes.append(f"{name} ok ({took})" if code == 0 else f"{name} FAILED (exit {code}, {took})")
    print(f"== summary: {', '.join(outcomes)}", flush=True)
    return code


def main() -> int:
    python = sys.executable
    return run_steps(
        [
            ("lint", [python, "-m", "ruff", "check", *SOURCES]),
            ("format", [python, "-m", "ruff", "format", "--check", *SOURCES]),
            ("types", [python, "-m", "mypy"]),
            ("units", [python, "scripts/check_units.py"]),
            ("monitoring", [python, "scripts/monitoring/check_rules.py"]),
            ("install", [python, "scripts/check_install.py"]),
            ("scenarios", [python, "scenarios/run_all.py", "--quick", "--seeds", "1,2", "--jobs", "6"]),
            ("simulation", [python, "scenarios/dst.py", "--seeds", "1-15", "--jobs", "2", "--output", "dst"]),
            # 40 examples over Poseidon's swagger.yaml send a PATCH whose base64 content is past ASCII.
            ("fuzz", [python, "scripts/fuzz_api.py", "--max-examples", "20", "--poseidon-examples", "40"]),
            # loadgroup: the tests of one xdist_group (the one that runs Prometheus) share a worker.
            (
                "tests",
                [python, "-m", "pytest", "--numprocesses", "auto", "--dist", "loadgroup", *sys.argv[1:]],
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
