"""Decode 50,000 realistic allocation events three ways and compare.

    python scripts/bench_decode.py [--events N] [--repeat R]

Prints events/s for bare ``orjson.loads`` (the baseline), for our decode into typed models
(``decode_batch``: parse + structure), their ratio, and a PASS/FAIL line for the target: our decode
takes at most 3x the bare parse time. Each figure is the best of ``--repeat`` runs, since this
machine's noise only ever makes a run slower.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from targets import target

from supervisor.nomad.decode import decode_batch

TARGET_RATIO = 3.0
FIXTURE = (
    Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "allocation_running_replacement.json"
)


def realistic_event_lines(count: int, seed: int = 1) -> list[bytes]:
    """AllocationUpdated batches of about 2.5 KB, each a running allocation with its task events."""
    rng = random.Random(seed)
    template: dict[str, Any] = orjson.loads(FIXTURE.read_bytes())
    lines = []
    for i in range(count):
        alloc = dict(template)
        alloc["ID"] = str(uuid.UUID(int=rng.getrandbits(128)))
        alloc["JobID"] = f"{rng.randrange(1, 40)}-{uuid.UUID(int=rng.getrandbits(128))}"
        alloc["ModifyIndex"] = 10_000 + i
        index = 10_000 + i
        event = {
            "Topic": "Allocation",
            "Type": "AllocationUpdated",
            "Key": alloc["ID"],
            "Namespace": "default",
            "FilterKeys": [alloc["JobID"], ""],
            "Index": index,
            "Payload": {"Allocation": alloc},
        }
        lines.append(orjson.dumps({"Index": index, "Events": [event]}))
    return lines


def best_of(repeat: int, work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    lines = realistic_event_lines(args.events)
    mean_size = sum(map(len, lines)) / len(lines)

    def bare() -> None:
        for line in lines:
            orjson.loads(line)

    def ours() -> None:
        for line in lines:
            decode_batch(line)

    bare_s = best_of(args.repeat, bare)
    ours_s = best_of(args.repeat, ours)
    ratio = ours_s / bare_s
    print(f"events: {args.events:,} of {mean_size:,.0f} bytes on average, best of {args.repeat}")
    print(f"{'orjson.loads (baseline)':<28}{args.events / bare_s:>12,.0f} events/s")
    print(f"{'decode_batch (typed)':<28}{args.events / ours_s:>12,.0f} events/s")
    print(f"{'ratio (typed / bare time)':<28}{ratio:>12.2f}x")
    ok = target("typed / bare parse", ratio <= TARGET_RATIO, f"{ratio:.2f}x", f"<= {TARGET_RATIO:g}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
