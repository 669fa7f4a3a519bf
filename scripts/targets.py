"""The benchmarks' target lines: one per target, in the one form ``bench_all.py`` reads."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["LINE", "target"]

# TARGET <name>: <figure> (target <limit>): PASS|FAIL; a name holds no colon
LINE: Final = re.compile(
    r"^TARGET (?P<name>[^:]+): (?P<figure>.*) \(target (?P<limit>.*)\): (?P<verdict>PASS|FAIL)$"
)


def target(name: str, ok: bool, figure: str, limit: str) -> bool:
    """Print the target's line; give back whether it is met."""
    assert ":" not in name, f"a target's name holds no colon: {name!r}"
    print(f"TARGET {name}: {figure} (target {limit}): {'PASS' if ok else 'FAIL'}", flush=True)
    return ok
