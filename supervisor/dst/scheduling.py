"""Trio's scheduling order, fixed by a seed: the one touch of trio's private parts in the project.

Trio runs the tasks that are ready in one batch, in a random order. It has a switch that makes that
order a function of its own random generator, which its own test
(``test_the_trio_scheduler_is_deterministic_if_seeded``) and pytest-trio use: with it set and the
generator seeded, a run whose every other input is fixed schedules its tasks the same way each time.
``tests/dst/test_scheduling.py`` fails if a release of trio moves or drops either.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

__all__ = ["deterministic_scheduling"]


@contextmanager
def deterministic_scheduling(seed: int) -> Iterator[None]:
    """Within the block, trio.run schedules ready tasks in an order given by ``seed``."""
    run = trio._core._run
    allowed = run._ALLOW_DETERMINISTIC_SCHEDULING
    state = run._r.getstate()
    run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    run._r.seed(seed)
    try:
        yield
    finally:
        run._ALLOW_DETERMINISTIC_SCHEDULING = allowed  # type: ignore[misc]
        run._r.setstate(state)
