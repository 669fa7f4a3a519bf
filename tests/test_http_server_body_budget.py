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
    first = await budget.take(6)
    taken: list[int] = []

    async def wait_for(size: int) -> None:
        taken.append(await budget.take(size))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for, 50)
        await trio.testing.wait_all_tasks_blocked()
        assert taken == []
        budget.give_back(first)
    assert taken == [10]
    assert budget.held == 10
    assert SMALL == 1024 * 1024
