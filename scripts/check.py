"""Every check the project has: lint, formatting, types, the quick scenarios, a short fuzzing pass
of the API, then the test suite.

    python scripts/check.py [pytest arguments...]

Stops at the first failing step and exits with its code. The tests run in one worker per core
(pytest-xdist): the daemon tests spend most of their time waiting on the simulated cluster's real
processes, so two workers halve the wall time on two cores. ``-n 0`` runs them in one process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [name for name in ("supervisor", "tests", "scripts", "scenarios") if (ROOT / name).is_dir()]


def main() -> int:
    python = sys.executable
    steps = [
        ("lint", [python, "-m", "ruff", "check", *SOURCES]),
        ("format", [python, "-m", "ruff", "format", "--check", *SOURCES]),
        ("types", [python, "-m", "mypy"]),
        ("scenarios", [python, "scenarios/run_all.py", "--quick"]),
        ("fuzz", [python, "scripts/fuzz_api.py", "--max-examples", "5"]),
        ("tests", [python, "-m", "pytest", "--numprocesses", "auto", *sys.argv[1:]]),
    ]
    for name, command in steps:
        print(f"== {name}: {' '.join(command[2:])}", flush=True)
        code = subprocess.run(command, cwd=ROOT, check=False).returncode
        if code != 0:
            print(f"== {name} failed (exit {code})", flush=True)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
