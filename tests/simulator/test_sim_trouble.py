"""Servers in trouble: for a window, 500s with Nomad's texts and slow answers; a 500'd write did
not apply unless drawn as applied; everything answers normally once the window ends."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from supervisor.base.errors import NomadUnavailableError
from supervisor.nomad import NomadClient, NomadSettings, RetryPolicy
from supervisor.simulator import SimulatedCluster
from supervisor.simulator.http.trouble import Trouble

from .conftest import batch_job

_NOT_APPLIED = (
    "No cluster leader",
    "timed out enqueuing operation",
    "leadership lost while committing log",
    "rpc error: failed to get conn: dial tcp 127.0.0.1:4647: i/o timeout",
    "rpc error: EOF",
    "rpc error: timed out enqueuing operation",
    "rpc error: leadership lost while committing log",
)
_APPLIED = (
    "leadership lost while committing log",
    "rpc error: EOF",
    "rpc error: leadership lost while committing log",
)


def trouble(duration: float = 10.0, **draws: float) -> Trouble:
    values: dict[str, Any] = {"errors": 0.0, "slow": 0.0, "max_delay": 0.0, "applied": 0.0, "seed": 1}
    return Trouble(duration, **{**values, **draws})


async def call(address: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=address) as http:
        return await http.request(method, path, **kwargs)


def job_exists(cluster: SimulatedCluster, job_id: str) -> bool:
    return ("default", job_id) in cluster.state.jobs


async def test_every_request_is_a_500_in_the_window_and_none_after(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    cluster.config.trouble.begin(trouble(10.0, errors=1.0))
    for address in cluster.addresses:
        listed = await call(address, "GET", "/v1/jobs")
        assert listed.status_code == 500
        assert listed.text in _NOT_APPLIED
        registered = await call(address, "PUT", "/v1/jobs", json={"Job": batch_job(f"r-{address[-5:]}")})
        assert registered.status_code == 500
        assert registered.text in _NOT_APPLIED
    assert not cluster.state.jobs, "a write answered 500 did not apply"
    leader = cluster.server(cluster.leader or "")
    assert leader is not None
    on_leader = await call(leader.address, "GET", "/v1/jobs")
    assert on_leader.text == "No cluster leader", "the leader forwards nothing: no rpc error"

    await trio.sleep(10.0)
    assert (await call(cluster.addresses[0], "GET", "/v1/jobs")).status_code == 200
    registered = await call(cluster.addresses[0], "PUT", "/v1/jobs", json={"Job": batch_job("after")})
    assert registered.status_code == 200
    assert job_exists(cluster, "after")


async def test_a_write_drawn_as_applied_is_done_though_answered_500(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    cluster.config.trouble.begin(trouble(5.0, errors=1.0, applied=1.0))
    answer = await call(cluster.addresses[1], "PUT", "/v1/jobs", json={"Job": batch_job("done")})
    assert answer.status_code == 500
    assert answer.text in _APPLIED, "only texts that do not rule the write's effect out"
    assert job_exists(cluster, "done")
    failed = await call(cluster.addresses[1], "PUT", "/v1/jobs", json={"Job": {}})
    assert failed.status_code == 400, "a write that fails keeps its own answer"
    await trio.sleep(5.0)
    again = await call(cluster.addresses[1], "PUT", "/v1/jobs", json={"Job": batch_job("done")})
    assert again.status_code == 200
    assert cluster.state.jobs[("default", "done")].version == 0, "the retry found it done"


async def test_slow_answers_come_late_by_at_most_the_drawn_delay(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    cluster.config.trouble.begin(trouble(20.0, slow=1.0, max_delay=3.0))
    delays = []
    for _ in range(5):
        before = trio.current_time()
        assert (await call(cluster.addresses[0], "GET", "/v1/nodes")).status_code == 200
        delays.append(trio.current_time() - before)
    assert all(0 < d <= 3.0 for d in delays)
    assert len(set(delays)) > 1, "each request draws its own delay"
    await trio.sleep(20.0)
    before = trio.current_time()
    await call(cluster.addresses[0], "GET", "/v1/nodes")
    assert trio.current_time() == before


async def test_one_server_in_trouble_leaves_the_others_alone(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    sick = cluster.servers[2]
    cluster.config.trouble.begin(trouble(10.0, errors=1.0), server=sick.name)
    assert (await call(sick.address, "GET", "/v1/nodes")).status_code == 500
    for healthy in cluster.servers[:2]:
        assert (await call(healthy.address, "GET", "/v1/nodes")).status_code == 200


async def test_the_fault_routes_and_the_event_stream_stay_out_of_it(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    cluster.config.trouble.begin(trouble(10.0, errors=1.0, slow=1.0, max_delay=3.0))
    before = trio.current_time()
    assert (await call(cluster.addresses[0], "GET", "/sim/v1/state")).status_code == 200
    async with (
        httpx.AsyncClient(base_url=cluster.addresses[0]) as http,
        http.stream("GET", "/v1/event/stream", params={"topic": "Node"}) as stream,
    ):
        assert stream.status_code == 200
    assert trio.current_time() == before


async def test_the_supervisor_client_retries_through_a_share_of_500s(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    cluster.config.trouble.begin(trouble(60.0, errors=0.5, seed=3))
    settings = NomadSettings(addresses=tuple(cluster.addresses), retry=RetryPolicy(attempts=10))
    async with NomadClient(settings) as nomad:
        for i in range(5):
            await nomad.register_job(batch_job(f"r-{i}"))
    assert all(job_exists(cluster, f"r-{i}") for i in range(5))
    once_settings = NomadSettings(addresses=tuple(cluster.addresses), retry=RetryPolicy(attempts=1))
    async with NomadClient(once_settings) as once:
        with pytest.raises(NomadUnavailableError):
            for _ in range(20):
                await once.list_nodes()
