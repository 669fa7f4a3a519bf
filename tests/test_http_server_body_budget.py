"""Large request bodies in parallel (the attack: many clients each sending megabytes at once): the
server reads at most its budget of large bodies at a time, the others wait their turn, and every
one is answered. Small settings: a budget of 4 MiB, bodies of 3 MiB."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from supervisor.api.http_server import HttpServerSettings
from supervisor.base.body_budget import SMALL, BodyBudget

from .http_serving import HttpClient, serving


async def test_large_bodies_are_read_within_the_budget_and_all_answered() -> None:
    reading: list[int] = []
    most = [0]
    release = trio.Event()

    async def upload(request: Request) -> Response:
        body = await request.body()
        if len(body) <= SMALL:
            return PlainTextResponse(str(len(body)))
        reading.append(len(body))
        most[0] = max(most[0], len(reading))
        await release.wait()  # the app holds the parsed body a while
        reading.pop()
        return PlainTextResponse(str(len(body)))

    app = Starlette(routes=[Route("/upload", upload, methods=["POST"])])
    size = 3 * 1024 * 1024
    answers: list[bytes] = []
    async with serving(app, HttpServerSettings(body_budget=4 * 1024 * 1024)) as served:

        async def send() -> None:
            client = HttpClient(await served.connect())
            answers.append((await client.request("POST", "/upload", body=b"x" * size))[1])

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            small = HttpClient(await served.connect())
            assert (await small.request("POST", "/upload", body=b"y" * 1000))[1] == b"1000", "never waits"
            await trio.testing.wait_all_tasks_blocked()
            assert len(reading) == 1, "the second large body waits for the first's exchange to end"
            release.set()
    assert answers == [str(size).encode()] * 3
    assert most[0] == 1


async def test_the_budget_lets_a_body_larger_than_it_through_alone(autojump_clock: Any) -> None:
    budget = BodyBudget(10)
    first = await budget.take(6, 15)
    taken: list[int | None] = []

    async def wait_for(size: int) -> None:
        taken.append(await budget.take(size, 15))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for, 50)
        await trio.testing.wait_all_tasks_blocked()
        assert taken == []
        assert first is not None
        budget.give_back(first)
    assert taken == [10]
    assert budget.held == 10
    assert SMALL == 1024 * 1024


async def test_the_budget_is_given_in_line_and_a_wait_has_an_end(autojump_clock: Any) -> None:
    """A steady flow of small shares cannot pass a large one that asked first; and a share not
    given within its patience is refused (None), its place in line given up."""
    budget = BodyBudget(10)
    held = await budget.take(6, 15)
    order: list[tuple[int, int | None]] = []

    async def wait_for(size: int, patience: float) -> None:
        order.append((size, await budget.take(size, patience)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for, 10, 15)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait_for, 2, 15)  # would fit now, but comes after the large one
        await trio.testing.wait_all_tasks_blocked()
        assert order == []
        await trio.sleep(5)
        assert held is not None
        budget.give_back(held)
        await trio.testing.wait_all_tasks_blocked()
        assert order == [(10, 10)]
        nursery.start_soon(wait_for, 3, 15)
    assert order == [(10, 10), (2, None), (3, None)]
    assert trio.current_time() == 5 + 15
