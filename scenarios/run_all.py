"""Run every scenario for some seeds; print one table, scenario by seed; exit 0 only if all pass.

    python scenarios/run_all.py [--quick] [--seeds 1,2,3,4,5] [--jobs N] [--only NAME,NAME]

``--quick`` (what the test command runs) uses small pools; either size runs seeds 1 to 5 unless
``--seeds`` says otherwise. A cell is ``ok``, or the first invariant that failed (``crashed`` if the
scenario ended without a report). ``--jobs`` runs that many scenarios at once (default 1): each
spends most of its time waiting on its cluster's timers, not on a core.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \| ")
WARNING_LINE = re.compile(r"\| (WARNING|ERROR|CRITICAL) +\|")
# The longest first (a failover mostly waits out a lock's lapse, twice), so that --jobs overlaps
# them; the storm next, beside them rather than beside busier ones: it times task starts to the
# tenth of a second, and a machine too loaded to keep that time blurs the storm it must show.
SCENARIOS = {
    "ha_failover": {"quick": ["--runners", "4"], "full": ["--runners", "20"]},
    "rolling_agent_restart_storm": {
        "quick": ["--runners", "120", "--nodes", "3"],
        "full": ["--runners", "200"],
    },
    "server_restart": {"quick": ["--runners", "4"], "full": ["--runners", "20"]},
    "all_agents_restart": {"quick": ["--runners", "6"], "full": ["--runners", "100"]},
    "rolling_agent_restart": {"quick": ["--runners", "6"], "full": ["--runners", "100"]},
    "agent_drain_restart": {"quick": ["--runners", "6"], "full": ["--runners", "30"]},
    "allocation_failures": {"quick": ["--runners", "6"], "full": ["--runners", "30"]},
    "node_down": {"quick": ["--runners", "6"], "full": ["--runners", "30"]},
    "daemon_restart": {"quick": ["--runners", "4"], "full": ["--runners", "30"]},
    "socket_restart": {
        "quick": ["--runners", "6", "--clients", "4"],
        "full": ["--runners", "20", "--clients", "12"],
    },
    "startup_adoption": {"quick": ["--runners", "4"], "full": ["--runners", "30"]},
    "rolling_upgrade": {"quick": ["--runners", "6"], "full": ["--runners", "30", "--rate", "8"]},
    "operator_drain": {"quick": ["--runners", "6"], "full": ["--runners", "30"]},
    "stream_flapping": {"quick": ["--runners", "6", "--seconds", "10"], "full": ["--runners", "20"]},
    "hostile_workspace": {"quick": ["--runners", "4"], "full": ["--runners", "20"]},
    "poseidon_parity": {"quick": ["--runners", "4"], "full": ["--runners", "20"]},
    "poseidon_switchover": {"quick": ["--quick", "--runners", "3"], "full": ["--runners", "30"]},
}


def run_one(name: str, options: list[str], seed: int, scratch: Path) -> str:
    """``ok``, the first failing invariant, or ``crashed``."""
    report = scratch / f"{name}-{seed}.json"
    argv = [sys.executable, str(HERE / f"{name}.py"), *options, "--seed", str(seed), "--report", str(report)]
    with (scratch / f"{name}-{seed}.log").open("wb") as log:
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    if not report.exists():
        return "crashed"
    failed = [k for k, v in json.loads(report.read_text())["invariants"].items() if not v["ok"]]
    if code == 0 and not failed:
        return "ok"
    return failed[0] if failed else f"exit {code}"


def print_tail(log: Path, lines: int = 40) -> None:
    """The end of a failed scenario's output (its table, or the traceback it ended with), without
    the daemon's and the cluster's log lines."""
    own = [line for line in log.read_text(errors="replace").splitlines() if not LOG_LINE.match(line)]
    print(f"--- {log.stem}: last {lines} lines of its own")
    for line in own[-lines:]:
        print(f"    {line}")


def print_report(run: Path, warnings: int = 30) -> None:
    """What a failed scenario's report says happened, and the daemon's and the cluster's last
    warnings and errors: the run's scratch directory is gone once the table is printed."""
    report = run.with_suffix(".json")
    if report.exists():
        print(f"--- {run.name}: its timeline")
        for event in json.loads(report.read_text()).get("timeline", []):
            print(f"    {json.dumps(event)}")
    log = run.with_suffix(".log")
    flagged = [line for line in log.read_text(errors="replace").splitlines() if WARNING_LINE.search(line)]
    if flagged:
        print(f"--- {run.name}: its last {warnings} logged warnings and errors")
    for line in flagged[-warnings:]:
        print(f"    {line[:300]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", default="1,2,3,4,5", help="comma-separated seeds (default: 1-5)")
    parser.add_argument("--jobs", type=int, default=1, help="scenarios run at once")
    parser.add_argument("--only", help="comma-separated scenario names (default: all)")
    args = parser.parse_args()
    chosen = {name: SCENARIOS[name] for name in (args.only.split(",") if args.only else SCENARIOS)}
    seeds = [int(s) for s in args.seeds.split(",")]
    size = "quick" if args.quick else "full"
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(max(1, args.jobs)) as pool:
        runs = {
            name: [pool.submit(run_one, name, options[size], seed, Path(scratch)) for seed in seeds]
            for name, options in chosen.items()
        }
        results = {name: [run.result() for run in row] for name, row in runs.items()}
        for name, row in results.items():
            for seed, cell in zip(seeds, row, strict=True):
                if cell != "ok":
                    print_tail(Path(scratch) / f"{name}-{seed}.log")
                    print_report(Path(scratch) / f"{name}-{seed}")
    width = max(len(name) for name in chosen)
    cells = [max(6, *(len(r[i]) for r in results.values())) for i in range(len(seeds))]
    print(
        f"{'scenario':<{width}}  "
        + "  ".join(f"{'seed ' + str(s):<{w}}" for s, w in zip(seeds, cells, strict=True))
    )
    for name, row in results.items():
        print(f"{name:<{width}}  " + "  ".join(f"{cell:<{w}}" for cell, w in zip(row, cells, strict=True)))
    failed = [name for name, row in results.items() if any(cell != "ok" for cell in row)]
    if failed:
        print(f"scenarios that failed: {', '.join(failed)} (of {len(chosen)})")
    else:
        print(f"every scenario held its invariants ({len(chosen)} scenarios, seeds {args.seeds})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
