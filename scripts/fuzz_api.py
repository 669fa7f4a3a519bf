"""Fuzz the API of a live daemon with schemathesis, over the OpenAPI document the daemon serves.

    python scripts/fuzz_api.py [--max-examples 50] [--phases examples,coverage,fuzzing,stateful]
                               [--seed 1] [--max-time SECONDS]

Starts ``supervisor run`` on its embedded simulated cluster at its default settings (with a token,
so that authentication is part of what is tried) in a process of its own, since schemathesis runs
on asyncio. Then schemathesis tries every operation of ``/api/v1/openapi.json``: examples, coverage
(values at and past every bound of the schema), fuzzing, and stateful sequences that follow the
document's links (an environment created, then read and deleted; a runner claimed, then its files
and executions). Checks: no 5xx (500 NOMAD_OVERLOAD aside, see ``fuzz_checks.py``), and every status
code, content type, header and body as the document says. Then the daemon is stopped with SIGTERM;
it must exit 0 and its log must hold no traceback. Exit code 0 only if all of that holds.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "fuzz-token"
CHECKS = (
    "no_server_error_but_overload",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "ignored_auth",
)


def start_daemon(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "SUPERVISOR_SERVER_TOKEN": TOKEN}
    env.pop("NOMAD_ADDR", None)
    argv = [sys.executable, "-m", "supervisor", "run", "--listen", "127.0.0.1:0"]
    with log.open("wb") as sink:
        daemon = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if "serving the API on " in line:
                return daemon, line.split("serving the API on ", 1)[1].split(",")[0].strip()
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited early; its log:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    daemon.kill()
    raise SystemExit("the daemon did not start within 60 s")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-examples", type=int, default=50)
    parser.add_argument("--phases", default="examples,coverage,fuzzing,stateful")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-time", type=int, default=0, help="seconds; 0: no budget")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "daemon.log"
        daemon, address = start_daemon(log)
        command = [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "run",
            f"{address}/api/v1/openapi.json",
            "--url",
            address,
            "--header",
            f"Poseidon-Token: {TOKEN}",
            "--checks",
            ",".join(CHECKS),
            "--phases",
            args.phases,
            "--max-examples",
            str(args.max_examples),
            "--seed",
            str(args.seed),
            "--workers",
            "1",
            "--suppress-health-check",
            "too_slow,filter_too_much",
            "--exclude-operation-id",
            "connectExecution",  # a WebSocket: tests/daemon covers it; schemathesis speaks HTTP only
            "--request-timeout",
            "30",
            *(["--max-time", str(args.max_time)] if args.max_time else []),
        ]
        hooks = {**os.environ, "SCHEMATHESIS_HOOKS": "fuzz_checks", "PYTHONPATH": str(ROOT / "scripts")}
        started = time.monotonic()
        fuzzed = subprocess.run(command, env=hooks, cwd=ROOT, check=False).returncode
        elapsed = time.monotonic() - started
        daemon.send_signal(signal.SIGTERM)
        try:
            stopped = daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            stopped = -1
        text = log.read_text(errors="replace")
        tracebacks = text.count("Traceback")
        print()
        print(f"{'what':<40}{'figure':>12}  {'target':>8}  result")
        rows = [
            ("schemathesis exit code", fuzzed, 0),
            ("daemon exit code after SIGTERM", stopped, 0),
            ("tracebacks in the daemon's log", tracebacks, 0),
        ]
        for name, figure, target in rows:
            print(f"{name:<40}{figure:>12}  {target:>8}  {'PASS' if figure == target else 'FAIL'}")
        print(f"{'seconds of fuzzing':<40}{elapsed:>12.1f}")
        if tracebacks or stopped != 0:
            print(text[-4000:])
        return 0 if all(figure == target for _, figure, target in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
