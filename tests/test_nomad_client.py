"""The REST client against httpx.MockTransport: requests as Nomad expects them, answers translated."""

from __future__ import annotations

import gc
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import httpx
import orjson
import pytest
import trio

from supervisor.base.errors import (
    ConfigError,
    NomadNotFound,
    NomadPermissionDenied,
    NomadRequestError,
    NomadUnavailableError,
    TerminalError,
    TransientError,
)
from supervisor.nomad import NomadClient, NomadSettings, RetryPolicy
from supervisor.nomad import exec as exec_module

from .conftest import load_fixture

Handler = Callable[[httpx.Request], httpx.Response]


def make_client(handler: Handler, **settings: Any) -> NomadClient:
    settings.setdefault("retry", RetryPolicy(attempts=3, base_delay=1.0, max_delay=4.0))
    return NomadClient(
        NomadSettings(**settings),
        transport=httpx.MockTransport(handler),
        random_fraction=lambda: 1.0,
    )


def json_response(data: object, *, index: int = 7, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        200, content=orjson.dumps(data), headers={"X-Nomad-Index": str(index), **(headers or {})}
    )


async def test_list_jobs_follows_pagination_and_sends_namespace_and_token() -> None:
    pages = load_fixture("jobs_list.json")
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if "next_token" not in request.url.params:
            return json_response(pages[:1], index=40, headers={"X-Nomad-NextToken": "29-0f3c"})
        return json_response(pages[1:], index=41)

    async with make_client(handler, token="s3cret", namespace="poseidon") as client:
        result = await client.list_jobs("29", meta=True, per_page=1)

    assert [job.id for job in result.value] == ["template-29", "29-0f3c1a2b-7d4e-11ef-9c3a-0242ac120002"]
    assert result.index == 40, "the first page's index: the earliest view of the list"
    first, second = seen
    assert first.url.path == "/v1/jobs"
    assert first.url.params["prefix"] == "29"
    assert first.url.params["meta"] == "true"
    assert first.url.params["per_page"] == "1"
    assert first.url.params["namespace"] == "poseidon"
    assert first.headers["X-Nomad-Token"] == "s3cret"
    assert second.url.params["next_token"] == "29-0f3c"


async def test_blocking_query_sends_index_and_wait_and_returns_the_index() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return json_response(load_fixture("job_runner.json"), index=1187)

    async with make_client(handler) as client:
        result = await client.get_job("parent/dispatch-1", index=1186, wait=30)

    assert result.value.id == "runner-7f3a"
    assert result.index == 1187
    request = seen[0]
    assert request.url.raw_path.startswith(b"/v1/job/parent%2Fdispatch-1?"), "IDs are path-escaped"
    assert request.url.params["index"] == "1186"
    assert request.url.params["wait"] == "30000ms"


async def test_list_allocations_with_resources_and_nodes_without_namespace() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/allocations":
            return json_response(load_fixture("allocations_list_resources.json"))
        return json_response(load_fixture("nodes_list.json"))

    async with make_client(handler) as client:
        allocations = await client.list_allocations()
        nodes = await client.list_nodes()

    assert allocations.value[0].ports[0].value == 24011
    assert seen[0].url.params["resources"] == "true"
    assert [n.name for n in nodes.value] == ["worker-03", "worker-05"]
    assert "namespace" not in seen[1].url.params, "nodes are not namespaced"


async def test_a_lean_listing_is_read_page_by_page_and_keeps_no_whole_objects() -> None:
    stubs = load_fixture("allocations_list_resources.json")
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if "next_token" not in request.url.params:
            return json_response(stubs[:1], index=50, headers={"X-Nomad-NextToken": stubs[1]["ID"]})
        return json_response(stubs[1:], index=51)

    async with make_client(handler) as client:
        lean = await client.list_allocations(per_page=1, lean=True)
        whole = await client.list_allocations(per_page=1)

    assert [r.url.params["per_page"] for r in seen] == ["1"] * 4
    assert lean.index == 50, "the first page's index: the earliest view"
    assert [a.id for a in lean.value] == [a.id for a in whole.value] == [s["ID"] for s in stubs]
    assert lean.value[0].ports == whole.value[0].ports
    assert lean.value[1].client_status == whole.value[1].client_status == stubs[1]["ClientStatus"]
    assert all(a.raw == {} for a in lean.value), "Nomad's whole objects are not kept"
    assert whole.value[1].task_group == "runner"
    assert lean.value[1].task_group == "", "a field decoded on first read is a zero value"


async def test_writes_send_nomads_bodies() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/jobs":
            return json_response({"EvalID": "e1", "EvalCreateIndex": 9, "JobModifyIndex": 9, "Index": 9})
        if request.method == "DELETE":
            return json_response({"EvalID": "", "Index": 0})
        return json_response({"NodeModifyIndex": 12, "EvalIDs": ["e2"], "EvalCreateIndex": 12, "Index": 12})

    async with make_client(handler) as client:
        registered = await client.register_job({"ID": "runner-1", "Type": "batch"})
        deregistered = await client.deregister_job("unknown-job", purge=True)
        drained = await client.drain_node("n1", deadline=15, message="rotate host")
        undrained = await client.drain_node("n1", deadline=None, mark_eligible=True)
        eligible = await client.set_eligibility("n1", eligible=True)

    assert registered.eval_id == "e1"
    assert registered.job_modify_index == 9
    assert orjson.loads(seen[0].content) == {"Job": {"ID": "runner-1", "Type": "batch"}}
    assert seen[1].url.params["purge"] == "true"
    assert deregistered.eval_id == "", "an unknown job is a 200 no-op"
    assert drained.eval_ids == ["e2"]
    assert orjson.loads(seen[2].content) == {
        "DrainSpec": {"Deadline": 15_000_000_000, "IgnoreSystemJobs": False},
        "MarkEligible": False,
        "Meta": {"message": "rotate host"},
    }
    assert orjson.loads(seen[3].content)["DrainSpec"] is None
    assert undrained.node_modify_index == 12
    assert orjson.loads(seen[4].content) == {"Eligibility": "eligible"}
    assert eligible.index == 12


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, "Job ID hasn't been provided", NomadRequestError),
        (403, "Permission denied", NomadPermissionDenied),
        (404, "job not found", NomadNotFound),
        (500, "node not found", NomadRequestError),
        (
            500,
            "can not set node's scheduling eligibility to eligible while it is draining",
            NomadRequestError,
        ),
    ],
)
async def test_terminal_answers_are_raised_at_once_with_nomads_text(
    status: int, body: str, expected: type[Exception]
) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(status, text=body, headers={"Content-Type": "text/plain"})

    async with make_client(handler) as client:
        with pytest.raises(expected) as caught:
            await client.get_job("runner-1")

    assert isinstance(caught.value, TerminalError)
    assert calls == 1, "terminal errors are never retried"
    assert caught.value.body == body  # type: ignore[attr-defined]
    assert caught.value.status_code == status  # type: ignore[attr-defined]
    assert body in str(caught.value)


async def test_no_cluster_leader_is_retried_with_backoff_on_the_next_server(
    autojump_clock: trio.abc.Clock,
) -> None:
    hosts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if len(hosts) < 3:
            return httpx.Response(500, text="No cluster leader")
        return json_response([], index=3)

    start = trio.current_time()
    async with make_client(
        handler, addresses=("http://s1:4646", "http://s2:4646", "http://s3:4646")
    ) as client:
        result = await client.list_nodes()
        assert client.address == "http://s3:4646", "the server that answered is kept"

    assert result.value == []
    assert hosts == ["s1", "s2", "s3"]
    assert trio.current_time() - start == pytest.approx(1.0 + 2.0), "exponential backoff: 1 s, then 2 s"


async def test_connection_refused_exhausts_the_retries_as_unavailable(autojump_clock: trio.abc.Clock) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    async with make_client(handler) as client:
        with pytest.raises(NomadUnavailableError) as caught:
            await client.list_jobs()

    assert isinstance(caught.value, TransientError)
    assert calls == 3
    assert caught.value.status_code is None
    assert "Connection refused" in str(caught.value)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_settings_read_nomads_environment_variables() -> None:
    settings = NomadSettings.from_env(
        {
            "NOMAD_ADDR": "https://nomad-1.example:4646,https://nomad-2.example:4646/",
            "NOMAD_TOKEN": "t0k3n",
            "NOMAD_NAMESPACE": "poseidon",
            "NOMAD_CACERT": "/etc/nomad/ca.pem",
            "NOMAD_CLIENT_CERT": "/etc/nomad/cli.pem",
            "NOMAD_CLIENT_KEY": "/etc/nomad/cli-key.pem",
        }
    )
    assert settings.addresses == ("https://nomad-1.example:4646", "https://nomad-2.example:4646")
    assert settings.token == "t0k3n"
    assert settings.namespace == "poseidon"
    assert (settings.ca_cert, settings.client_cert, settings.client_key) == (
        "/etc/nomad/ca.pem",
        "/etc/nomad/cli.pem",
        "/etc/nomad/cli-key.pem",
    )
    assert settings.uses_tls
    assert NomadSettings.from_env({}).addresses == ("http://127.0.0.1:4646",)
    assert NomadSettings.from_env({"NOMAD_TOKEN": "a"}, token="b").token == "b", "explicit settings win"


def test_bad_address_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"nomad\.address: 'nomad:4646'"):
        NomadSettings(addresses=("nomad:4646",))


def test_tls_context_loads_the_ca_and_checks_its_files(tmp_path: Path) -> None:
    settings = NomadSettings(addresses=("https://nomad:4646",), ca_cert=str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match="TLS files could not be loaded"):
        settings.ssl_context()
    with pytest.raises(ConfigError, match="given together"):
        NomadSettings(addresses=("https://nomad:4646",), client_cert="c.pem").ssl_context()
    context = NomadSettings(addresses=("https://nomad:4646",), skip_verify=True).ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_NONE
    assert NomadSettings().ssl_context() is None, "plain http needs no context"


async def test_exec_sessions_share_the_clients_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[object] = []

    async def refuse(stream: object, context: ssl.SSLContext, *_: object) -> NoReturn:
        given.append(context)
        raise NomadUnavailableError("the TLS handshake failed")

    monkeypatch.setattr(exec_module, "_over_tls", refuse)
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    async with NomadClient(NomadSettings(addresses=(f"https://127.0.0.1:{port}",))) as client:
        for _ in range(3):
            with pytest.raises(NomadUnavailableError):
                async with client.open_exec("a1", task="t", command=["true"]):
                    pass
    assert isinstance(given[0], ssl.SSLContext)
    assert given == [given[0]] * 3, "one TLS context per client, not one per exec session"
    await listener.aclose()


def checked(context: ssl.SSLContext) -> str | None:
    """The name the context checks on a peer dialled at 10.0.0.9."""
    return context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="10.0.0.9").server_hostname


def test_tls_checks_the_configured_name_on_servers_and_clients_name_on_agents() -> None:
    settings = NomadSettings(addresses=("https://10.0.0.1:4646",), tls_server_name="server.global.nomad")
    server = settings.ssl_context()
    agent = settings.ssl_context(checked_name=settings.agent_tls_name, always=True)
    assert server is not None
    assert agent is not None
    assert checked(server) == "server.global.nomad"
    assert checked(agent) == "client.global.nomad"
    assert NomadSettings(region="eu").agent_tls_name == "client.eu.nomad"
    plain = NomadSettings(addresses=("https://10.0.0.1:4646",)).ssl_context()
    assert plain is not None
    assert checked(plain) == "10.0.0.9"


@pytest.mark.parametrize(
    ("value", "skips"),
    [("1", True), ("t", True), ("TRUE", True), ("True", True), ("0", False), ("yes", False)],
)
def test_nomad_skip_verify_is_read_as_nomads_cli_reads_it(value: str, skips: bool) -> None:
    settings = NomadSettings.from_env({"NOMAD_ADDR": "https://10.0.0.1:4646", "NOMAD_SKIP_VERIFY": value})
    assert settings.skip_verify is skips


async def test_a_read_response_is_freed_without_the_garbage_collector() -> None:
    # httpx binds each response's stream to the response; unless the client breaks that cycle, a
    # listing's body stays in memory until the collector's next full pass.
    def handler(request: httpx.Request) -> httpx.Response:
        return json_response(load_fixture("jobs_list.json"))

    def responses() -> int:
        return sum(isinstance(o, httpx.Response) for o in gc.get_objects())

    async with make_client(handler) as client:
        gc.collect()
        before = responses()
        gc.disable()
        try:
            for _ in range(3):
                await client.list_jobs(meta=True)
            assert responses() == before
        finally:
            gc.enable()
