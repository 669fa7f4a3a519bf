"""Bad input never reaches a 500: bounds on every number, limits on bodies, messages and PATCHes,
and the routes' own errors as JSON."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
import trio
import trio_websocket
from starlette.routing import Route, WebSocketRoute

from supervisor.api.app import create_app
from supervisor.core.commands import MAX_COMMAND_BYTES
from supervisor.core.config import ServerSettings, Settings

from .conftest import ENVIRONMENT, Harness

LIMITED = Settings(server=ServerSettings(port=0, max_body=4096, max_message=1024, max_files=3))


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/execution-environments/0", {"cpuLimit": 1.7976931348623157e308}, "cpuLimit"),
        ("/execution-environments/0", {"cpuLimit": 99999999999999999999999}, "cpuLimit"),
        ("/execution-environments/0", {"memoryLimit": 2**40}, "memoryLimit"),
        ("/execution-environments/0", {"exposedPorts": [2**64]}, "exposedPorts"),
        ("/execution-environments/0", {"id": False}, "id"),
        ("/execution-environments/18446744073709551616", {}, "executionEnvironmentId"),
    ],
)
async def test_numbers_past_their_bounds_are_400_naming_the_field(
    harness: Harness, path: str, body: dict[str, Any], field: str
) -> None:
    response = await harness.http.put(path, json={**ENVIRONMENT, **body})
    assert response.status_code == 400, response.text
    assert field in response.json()["message"]


async def test_a_huge_integer_is_shown_as_the_integer_it_is(harness: Harness) -> None:
    huge = 1180591620717411303425
    response = await harness.http.put(
        "/execution-environments/0", json={**ENVIRONMENT, "prewarmingPoolSize": huge}
    )
    assert response.status_code == 400
    assert response.json()["message"].endswith(f"got {huge}"), response.text


@pytest.mark.parametrize("leaf", ["1", "1180591620717411303425"])
async def test_a_deeply_nested_body_is_a_400(harness: Harness, leaf: str) -> None:
    body = "[" * 1000 + leaf + "]" * 1000
    for method, path in (("PUT", "/execution-environments/10"), ("POST", "/runners")):
        response = await harness.http.request(method, path, content=body)
        assert response.status_code == 400, response.text
        assert "message" in response.json()


async def test_times_past_their_bounds_are_400(harness: Harness) -> None:
    await harness.environment(10)
    claim = await harness.http.post(
        "/runners", json={"executionEnvironmentId": 10, "inactivityTimeout": 10**30}
    )
    assert claim.status_code == 400
    assert "inactivityTimeout" in claim.json()["message"]
    runner = await harness.runner(10)
    execute = await harness.http.post(
        f"/runners/{runner}/execute", json={"command": "true", "timeLimit": 2**63}
    )
    assert execute.status_code == 400
    assert "timeLimit" in execute.json()["message"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"command": "echo \0"}, "NUL"),
        ({"command": "x" * (MAX_COMMAND_BYTES + 1)}, "at most"),
        ({"command": "true", "environment": {"A\n": "x"}}, "valid variable name"),
        ({"command": "true", "environment": {"A": "\0"}}, "NUL"),
        ({"command": "true", "environment": []}, "environment"),
    ],
)
async def test_commands_no_runner_could_take_are_400(
    harness: Harness, body: dict[str, Any], words: str
) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    response = await harness.http.post(f"/runners/{runner}/execute", json=body)
    assert response.status_code == 400
    assert words in response.json()["message"]


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        ({"copy": [{"path": "a" * 256}]}, "longer than 255"),
        ({"copy": [{"path": "a/" * 2100 + "b"}]}, "longer than 4095"),
        ({"copy": {}}, "copy must be an array or null, got {}"),
        ({"delete": "x"}, "delete must be an array or null, got 'x'"),
    ],
)
async def test_paths_and_shapes_no_runner_could_take_are_400(
    harness: Harness, patch: dict[str, Any], words: str
) -> None:
    response = await harness.http.patch("/runners/10-anything/files", json=patch)
    assert response.status_code == 400, "the body is checked before the runner"
    assert words in response.json()["message"]


class _Chunks:
    """A chunked body with no length (not an async generator: one the server stops reading early
    would be left to the garbage collector)."""

    def __init__(self, count: int, size: int) -> None:
        self.left = count
        self.size = size

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        if self.left == 0:
            raise StopAsyncIteration
        self.left -= 1
        return b" " * self.size


@pytest.mark.parametrize("settings", [LIMITED])
async def test_a_body_over_the_limit_is_413_before_it_is_read_whole(
    harness: Harness, settings: Settings
) -> None:
    big = {"copy": [{"path": "big.txt", "content": base64.b64encode(b"x" * 8192).decode()}]}
    sized = await harness.http.patch("/runners/10-anything/files", json=big)
    assert sized.status_code == 413
    assert "server.max_body" in sized.json()["message"]

    chunked = await harness.http.patch("/runners/10-anything/files", content=_Chunks(100, 1024))
    assert chunked.status_code == 413
    assert "server.max_body" in chunked.json()["message"]


@pytest.mark.parametrize("settings", [LIMITED])
async def test_a_patch_with_too_many_entries_is_400(harness: Harness, settings: Settings) -> None:
    patch = {"delete": ["a", "b"], "copy": [{"path": "c"}, {"path": "d"}]}
    response = await harness.http.patch("/runners/10-anything/files", json=patch)
    assert response.status_code == 400
    assert "at most 3" in response.json()["message"]


@pytest.mark.parametrize("settings", [LIMITED])
async def test_a_websocket_message_over_the_limit_closes_with_1009(
    harness: Harness, settings: Settings
) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    prepared = await harness.http.post(f"/runners/{runner}/execute", json={"command": "cat"})
    async with trio_websocket.open_websocket_url(prepared.json()["websocketUrl"]) as ws:
        assert await ws.get_message() == '{"type":"start"}'
        await ws.send_message("x" * 2048)
        with trio.fail_after(10), pytest.raises(trio_websocket.ConnectionClosed) as closed:
            while True:
                await ws.get_message()
    assert closed.value.reason is not None
    assert closed.value.reason.code == 1009
    await harness.wait_for(lambda: harness.service.executions.running_count == 0)
    assert harness.cluster.execs.count == 0, "the command was stopped"


async def test_an_execution_url_is_single_use_and_bound_to_its_runner(harness: Harness) -> None:
    await harness.environment(10)
    first, second = await harness.runner(10), await harness.runner(10)
    prepared = await harness.http.post(f"/runners/{first}/execute", json={"command": "true"})
    url = prepared.json()["websocketUrl"]
    with pytest.raises(trio_websocket.ConnectionRejected) as elsewhere:
        async with trio_websocket.open_websocket_url(url.replace(first, second)):
            pass  # pragma: no cover
    assert elsewhere.value.status_code == 404
    with pytest.raises(trio_websocket.ConnectionRejected) as again:
        async with trio_websocket.open_websocket_url(url):
            pass  # pragma: no cover
    assert again.value.status_code == 404, "an attempt on another runner used the URL up"


async def test_routing_errors_are_json(harness: Harness) -> None:
    missing = await harness.http.get("/no-such-route")
    assert (missing.status_code, missing.json()) == (404, {"message": "Not Found"})
    wrong = await harness.http.post("/version")
    assert wrong.status_code == 405
    assert wrong.json() == {"message": "Method Not Allowed"}
    assert "GET" in wrong.headers["allow"]
    plain = await harness.http.get("/runners/x/websocket", params={"executionID": "y"})
    assert plain.status_code == 426
    assert plain.headers["upgrade"] == "websocket"


async def test_the_openapi_document_names_every_route_and_method(harness: Harness) -> None:
    document = (await harness.http.get("/openapi.json")).json()
    app = create_app(harness.service, Settings())
    inner: Any = app
    while not hasattr(inner, "routes"):
        inner = inner.app
    served = set()
    for route in inner.routes:
        path = route.path.replace("{runner_id}", "{runnerId}").replace(
            "{environment_id}", "{executionEnvironmentId}"
        )
        if isinstance(route, WebSocketRoute):
            served.add((path, "get"))
        elif isinstance(route, Route):
            served |= {(path, method.lower()) for method in route.methods or () if method != "HEAD"}
    documented = {
        (path, method)
        for path, item in document["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert served == documented


async def test_the_token_is_compared_in_constant_time(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hmac

    compared: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr("supervisor.api.app.hmac.compare_digest", recording)
    app = create_app(harness.service, Settings(server=ServerSettings(token="s3cret")))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        response = await http.get(
            "/api/v1/statistics/execution-environments", headers={"Poseidon-Token": "guess"}
        )
    assert response.status_code == 401
    assert compared == [(b"guess", b"s3cret")]
