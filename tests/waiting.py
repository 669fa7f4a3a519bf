"""Waiting for a condition on state that many tasks change, without polling.

The condition is checked after every step of every task in the test's trio run (trio's
``Instrument.after_task_step``): any change to the daemon's or the simulated cluster's state happens
in some task's step, so the wait wakes on the step that makes the condition true, and on no other.
"""

from __future__ import annotations

from collections.abc import Callable

import trio


class _Watch(trio.abc.Instrument):
    def __init__(self, condition: Callable[[], bool]) -> None:
        self.condition = condition
        self.met = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        self._told = False

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if not self._told and self.condition():
            self._told = True
            self._token.run_sync_soon(self.met.set)  # an instrument must not reschedule tasks itself


async def wait_until(condition: Callable[[], bool], *, within: float) -> None:
    """Return once ``condition()`` holds; ``trio.TooSlowError`` after ``within`` seconds."""
    if condition():
        return
    watch = _Watch(condition)
    trio.lowlevel.add_instrument(watch)
    try:
        with trio.fail_after(within):
            await watch.met.wait()
    finally:
        trio.lowlevel.remove_instrument(watch)
