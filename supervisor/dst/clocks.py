"""The process's own clocks, read from the simulation's virtual clock while a seed runs.

Libraries below the daemon measure some durations on ``time.monotonic`` rather than on trio's
clock: httpcore's connection pool expires a kept-alive connection after 5 s of it, so on a virtual
clock a connection was reused or closed by how fast the machine ran the seed, and the same seed
scheduled its tasks differently from one run to the next. Within a run, ``time.monotonic`` is
trio's virtual clock and ``time.time`` the cluster's epoch plus it; ``time.perf_counter``, which
the MockClock itself and the run's wall time read, stays real.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["virtual_process_clocks"]


@contextmanager
def virtual_process_clocks(now: Callable[[], float], epoch: float) -> Iterator[None]:
    """Within the block, ``time.monotonic()`` is ``now()`` and ``time.time()`` is ``epoch + now()``
    (their ``_ns`` forms alike)."""
    saved = (time.monotonic, time.monotonic_ns, time.time, time.time_ns)

    def monotonic_ns() -> int:
        return int(now() * 1e9)

    def time_ns() -> int:
        return int((epoch + now()) * 1e9)

    time.monotonic, time.monotonic_ns = now, monotonic_ns
    time.time, time.time_ns = (lambda: epoch + now()), time_ns
    try:
        yield
    finally:
        time.monotonic, time.monotonic_ns, time.time, time.time_ns = saved
