"""Run every scenario; exit 0 only if all pass.

    python scenarios/run_all.py [--quick]

``--quick`` (what the test command runs) uses small pools.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = {
    "server_restart": {"quick": ["--runners", "4"], "full": ["--runners", "20"]},
    "all_agents_restart": {"quick": ["--runners", "6"], "full": ["--runners", "100"]},
    "rolling_agent_restart": {"quick": ["--runners", "6"], "full": ["--runners", "100"]},
    "agent_drain_restart": {"quick": ["--runners", "6"], "full": ["--runners", "30"]},
    "allocation_failures": {"quick": ["--runners", "6"], "full": ["--runners", "30"]},
    "node_down": {"quick": ["--runners", "6"], "full": ["--runners", "30"]},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    failed = []
    for name, options in SCENARIOS.items():
        argv = [sys.executable, str(HERE / f"{name}.py"), *options["quick" if args.quick else "full"]]
        result = subprocess.run(argv, stderr=subprocess.DEVNULL, check=False)
        if result.returncode != 0:
            failed.append(name)
    if failed:
        print(f"scenarios that failed: {', '.join(failed)} (of {len(SCENARIOS)})")
    else:
        print(f"every scenario held its invariants ({len(SCENARIOS)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
