"""The one private touch of trio: its switch for a seeded scheduling order still exists and works."""

from __future__ import annotations

import trio

from supervisor.dst.scheduling import deterministic_scheduling


def _order() -> list[int]:
    seen: list[int] = []

    async def worker(i: int) -> None:
        for _ in range(3):
            seen.append(i)
            await trio.lowlevel.checkpoint()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(worker, i)

    trio.run(main)
    return seen


def test_trio_still_has_the_switch_and_its_generator() -> None:
    run = trio._core._run
    assert isinstance(run._ALLOW_DETERMINISTIC_SCHEDULING, bool)
    assert hasattr(run._r, "seed")
    assert hasattr(run._r, "shuffle")


def test_a_seed_fixes_the_scheduling_order_and_another_changes_it() -> None:
    with deterministic_scheduling(1):
        first = _order()
    with deterministic_scheduling(1):
        again = _order()
    orders = set()
    for seed in range(2, 8):
        with deterministic_scheduling(seed):
            orders.add(tuple(_order()))
    assert first == again
    assert len(orders | {tuple(first)}) > 1, "seeds that order alike are no seeds"


def test_the_switch_is_put_back_afterwards() -> None:
    before = trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING
    with deterministic_scheduling(3):
        assert trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING
    assert trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING is before
