"""What happened in a simulated run, line by line, with its virtual time, and its SHA-256.

Two runs of one seed give the same lines, so the same hash; the first line where two traces differ
is where determinism was lost.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from attrs import define, field

__all__ = ["Trace"]


@define(eq=False)
class Trace:
    """Lines ``<virtual seconds> <kind> <details>``; every line also goes into the hash."""

    clock: Callable[[], float]
    keep: bool = False
    lines: list[str] = field(factory=list)
    count: int = 0
    _hash: hashlib._Hash = field(factory=hashlib.sha256)

    def record(self, kind: str, details: str = "") -> None:
        """One line at the current virtual time."""
        line = f"{self.clock():.6f} {kind} {details}\n"
        self._hash.update(line.encode())
        self.count += 1
        if self.keep:
            self.lines.append(line)

    @property
    def digest(self) -> str:
        """The SHA-256 of every line so far, as hex."""
        return self._hash.hexdigest()
