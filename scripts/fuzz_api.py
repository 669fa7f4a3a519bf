"""Fuzz the API of a live daemon with schemathesis, over the OpenAPI document the daemon serves and
over Poseidon's own swagger.yaml.

    python scripts/fuzz_api.py [--max-examples 50] [--poseidon-examples N] [--specs ours,poseidon]
                               [--phases examples,coverage,fuzzing,stateful] [--seed 1] [--max-time SECONDS]

Starts ``supervisor run`` on its embedded simulated cluster at its default settings (with a token,
so that authentication is part of what is tried) in a process of its own, since schemathesis runs
on asyncio. Then schemathesis tries every operation of ``/api/v1/openapi.json``: examples, coverage
(values at and past every bound of the schema), fuzzing, and stateful sequences that follow the
document's links (an environment created, then read and deleted; a runner claimed, then its files
and executions). Checks: no 5xx (500 NOMAD_OVERLOAD aside, see ``fuzz_checks.py``), every refusal
JSON with a message, and every status code, content type, header and body as the document says.

Then the same over Poseidon's swagger.yaml (``tests/fixtures/poseidon-swagger.yaml``), which bounds
almost nothing: any string where ours says base64, any integer, any variable name. Its cases are
what a Poseidon client may send; the checks are the ones it makes a promise of: no 5xx (but
NOMAD_OVERLOAD), every refusal JSON, and the token required where it says so. Our answers differ
from its document on purpose where ours says so (a 400 it does not list, fields of a file header it
leaves out), so status codes and bodies are checked against ours only.

Then the daemon is stopped with SIGTERM; it must exit 0 and its log must hold no traceback. Exit
code 0 only if all of that holds.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "fuzz-token"
POSEIDON_SWAGGER = ROOT / "tests" / "fixtures" / "poseidon-swagger.yaml"
CHECKS = (
    "no_server_error_but_overload",
    "refusals_are_json",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "ignored_auth",
)
POSEIDON_CHECKS = ("no_server_error_but_overload", "refusals_are_json", "ignored_auth")
# A WebSocket: tests/daemon covers it; schemathesis speaks HTTP only.
WEBSOCKET_PATH = "/runners/{runnerId}/websocket"


@dataclass(frozen=True)
class Spec:
    """One document to fuzz the daemon over, and what to check of its answers."""

    name: str
    location: str
    base_url: str
    checks: tuple[str, ...]
    phases: str
    max_examples: int
    exclude: tuple[str, ...]


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


def schemathesis_run(spec: Spec, seed: int, max_time: int) -> int:
    """schemathesis over one document; its exit code."""
    print(f"== schemathesis over {spec.name}: {spec.location}", flush=True)
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        spec.location,
        "--url",
        spec.base_url,
        "--header",
        f"Poseidon-Token: {TOKEN}",
        "--checks",
        ",".join(spec.checks),
        "--phases",
        spec.phases,
        "--max-examples",
        str(spec.max_examples),
        "--seed",
        str(seed),
        "--workers",
        "1",
        "--suppress-health-check",
        "too_slow,filter_too_much,data_too_large",
        *spec.exclude,
        "--request-timeout",
        "30",
        *(["--max-time", str(max_time)] if max_time else []),
    ]
    hooks = {**os.environ, "SCHEMATHESIS_HOOKS": "fuzz_checks", "PYTHONPATH": str(ROOT / "scripts")}
    return subprocess.run(command, env=hooks, cwd=ROOT, check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-examples", type=int, default=50)
    parser.add_argument("--poseidon-examples", type=int, default=0, help="0: as --max-examples")
    parser.add_argument("--specs", default="ours,poseidon", help="which documents: ours, poseidon")
    parser.add_argument("--phases", default="examples,coverage,fuzzing,stateful")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-time", type=int, default=0, help="seconds, for each document; 0: no budget")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "daemon.log"
        daemon, address = start_daemon(log)
        specs = {
            "ours": Spec(
                "ours",
                f"{address}/api/v1/openapi.json",
                address,
                CHECKS,
                args.phases,
                args.max_examples,
                ("--exclude-operation-id", "connectExecution"),
            ),
            # Its links are none: no stateful phase.
            "poseidon": Spec(
                "Poseidon's swagger.yaml",
                str(POSEIDON_SWAGGER),
                f"{address}/api/v1",
                POSEIDON_CHECKS,
                ",".join(p for p in args.phases.split(",") if p != "stateful"),
                args.poseidon_examples or args.max_examples,
                ("--exclude-path", WEBSOCKET_PATH),
            ),
        }
        rows: list[tuple[str, float, float]] = []
        timings = []
        for name in args.specs.split(","):
            started = time.monotonic()
            code = schemathesis_run(specs[name], args.seed, args.max_time)
            timings.append((specs[name].name, time.monotonic() - started))
            rows.append((f"schemathesis over {specs[name].name}", code, 0))
        daemon.send_signal(signal.SIGTERM)
        try:
            stopped = daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            stopped = -1
        text = log.read_text(errors="replace")
        tracebacks = text.count("Traceback")
        rows += [
            ("daemon exit code after SIGTERM", stopped, 0),
            ("tracebacks in the daemon's log", tracebacks, 0),
        ]
        print()
        print(f"{'what':<48}{'figure':>12}  {'target':>8}  result")
        for what, figure, target in rows:
            print(f"{what:<48}{figure:>12}  {target:>8}  {'PASS' if figure == target else 'FAIL'}")
        for what, seconds in timings:
            print(f"{'seconds over ' + what:<48}{seconds:>12.1f}")
        if tracebacks or stopped != 0:
            print(text[-4000:])
        return 0 if all(figure == target for _, figure, target in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
