"""Nomad Variables and their locks in the simulated cluster, over real HTTP, as Nomad answers them.

What Nomad does, and where it says so (hashicorp/nomad): ``command/agent/variable_endpoint.go`` (the
HTTP answers, 409 with the conflicting variable), ``nomad/variables_endpoint.go`` (lock errors, the
renewal), ``nomad/state/state_store_variables.go`` (conflicts), ``nomad/structs/variables.go`` (TTL
bounds and defaults), the leader's lock timers (twice the TTL, then LockDelay, then the lock goes;
restored by every new leader), and ``website/content/api-docs/variables/*.mdx``.

Rules of these tests: pytest-trio's ``trio_mode``; ``autojump_clock`` wherever time passes, with the
expected ``trio.current_time()`` asserted and each such test capped by ``trio.fail_after`` on the
virtual clock; the cluster's servers listen on 127.0.0.1, port 0, started with ``nursery.start``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from supervisor.simulator import SimulatedCluster
from supervisor.simulator.state.store import PublishedBatch

UUID_LENGTH = 36
TTL_OUT_OF_BOUNDS = "RPC Error:: 400,1 error occurred:\n\t* TTL must be between 10 seconds and 24 hours\n\n"


async def call(
    cluster: SimulatedCluster, method: str, path: str, body: Any = None, *, server: int = 0
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=cluster.addresses[server], timeout=60) as http:
        return await http.request(method, path, json=body)


def zero_variable(path: str) -> dict[str, Any]:
    """The conflict Nomad answers for a variable another's lock holds: its data is not shown."""
    keys = ("CreateIndex", "CreateTime", "ModifyIndex", "ModifyTime")
    return {"Namespace": "default", "Path": path, **dict.fromkeys(keys, 0)}


def lock(ttl: str = "15s", delay: str = "15s", lock_id: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"TTL": ttl, "LockDelay": delay}
    if lock_id:
        spec["ID"] = lock_id
    return {"Lock": spec}


async def acquire(cluster: SimulatedCluster, path: str, **kwargs: str) -> str:
    response = await call(cluster, "PUT", f"/v1/var/{path}?lock-acquire", lock(**kwargs))
    assert response.status_code == 200, response.text
    lock_id: str = response.json()["Lock"]["ID"]
    return lock_id


# -- variables ------------------------------------------------------------------------------------


async def test_put_answers_the_stored_variable_and_get_reads_it(cluster: SimulatedCluster) -> None:
    created = await call(cluster, "PUT", "/v1/var/app/config", {"Items": {"user": "me"}})
    assert created.status_code == 200
    assert created.headers["content-type"] == "application/json"
    data = created.json()
    assert set(data) == {
        "Namespace",
        "Path",
        "CreateIndex",
        "CreateTime",
        "ModifyIndex",
        "ModifyTime",
        "Items",
    }
    assert (data["Namespace"], data["Path"], data["Items"]) == ("default", "app/config", {"user": "me"})
    assert data["CreateIndex"] == data["ModifyIndex"] == int(created.headers["X-Nomad-Index"])
    assert data["CreateTime"] == data["ModifyTime"] > 10**18, "Unix nanoseconds"

    updated = (await call(cluster, "PUT", "/v1/var/app/config", {"Items": {"user": "you"}})).json()
    assert updated["CreateIndex"] == data["CreateIndex"]
    assert updated["CreateTime"] == data["CreateTime"]
    assert updated["ModifyIndex"] > data["ModifyIndex"]

    read = await call(cluster, "GET", "/v1/var/app/config", server=2)
    assert read.status_code == 200
    assert read.json() == updated, "any server answers from the replicated state"
    assert int(read.headers["X-Nomad-Index"]) == updated["ModifyIndex"]


async def test_bad_requests_are_answered_as_nomad_does(cluster: SimulatedCluster) -> None:
    missing = await call(cluster, "GET", "/v1/var/not/there")
    assert (missing.status_code, missing.text) == (404, "variable not found")
    no_items = await call(cluster, "PUT", "/v1/var/app/empty", {"Items": {}})
    assert (no_items.status_code, no_items.text) == (400, "variable missing required Items object")
    no_path = await call(cluster, "GET", "/v1/var/")
    assert (no_path.status_code, no_path.text) == (400, "missing variable path")
    bad_path = await call(cluster, "PUT", "/v1/var/app/a.b", {"Items": {"k": "v"}})
    assert (bad_path.status_code, bad_path.text) == (400, 'RPC Error:: 400,invalid path "app/a.b"')
    not_strings = await call(cluster, "PUT", "/v1/var/app/n", {"Items": {"k": 1}})
    assert not_strings.status_code == 400
    bad_cas = await call(cluster, "PUT", "/v1/var/app/n?cas=x", {"Items": {"k": "v"}})
    assert bad_cas.status_code == 400
    assert bad_cas.text == 'can not parse cas: strconv.ParseUint: parsing "x": invalid syntax'


async def test_list_answers_metadata_by_prefix_and_namespace(cluster: SimulatedCluster) -> None:
    assert (await call(cluster, "GET", "/v1/vars")).json() == []
    for path in ("b/two", "a/one", "a/one/child", "c"):
        await call(cluster, "PUT", f"/v1/var/{path}", {"Items": {"k": "v"}})
    await call(cluster, "PUT", "/v1/var/a/prod?namespace=prod", {"Items": {"k": "v"}})
    listed = await call(cluster, "GET", "/v1/vars?prefix=a")
    assert [v["Path"] for v in listed.json()] == ["a/one", "a/one/child"]
    assert all("Items" not in v for v in listed.json()), "the list carries no items"
    assert int(listed.headers["X-Nomad-Index"]) == cluster.state.table_index["variables"]
    everywhere = (await call(cluster, "GET", "/v1/vars?namespace=*&prefix=a")).json()
    assert [(v["Namespace"], v["Path"]) for v in everywhere] == [
        ("default", "a/one"),
        ("default", "a/one/child"),
        ("prod", "a/prod"),
    ]
    page = await call(cluster, "GET", "/v1/vars?per_page=2")
    assert [v["Path"] for v in page.json()] == ["a/one", "a/one/child"]
    rest = await call(cluster, "GET", f"/v1/vars?per_page=2&next_token={page.headers['X-Nomad-NextToken']}")
    assert [v["Path"] for v in rest.json()] == ["b/two", "c"]


async def test_namespaces_keep_variables_apart(cluster: SimulatedCluster) -> None:
    await call(cluster, "PUT", "/v1/var/shared?namespace=prod", {"Items": {"env": "prod"}})
    assert (await call(cluster, "GET", "/v1/var/shared")).status_code == 404
    assert (await call(cluster, "GET", "/v1/var/shared?namespace=prod")).json()["Items"] == {"env": "prod"}
    # Nomad's apply takes the body's namespace first.
    await call(cluster, "PUT", "/v1/var/shared", {"Namespace": "dev", "Items": {"env": "dev"}})
    assert (await call(cluster, "GET", "/v1/var/shared?namespace=dev")).json()["Namespace"] == "dev"


async def test_check_and_set_conflicts_answer_409_with_the_current_variable(
    cluster: SimulatedCluster,
) -> None:
    current = (await call(cluster, "PUT", "/v1/var/cas/x", {"Items": {"v": "1"}})).json()
    stale = await call(
        cluster, "PUT", f"/v1/var/cas/x?cas={current['ModifyIndex'] - 1}", {"Items": {"v": "2"}}
    )
    assert stale.status_code == 409
    assert stale.json() == current, "the conflict body is the variable as it is"
    assert int(stale.headers["X-Nomad-Index"]) == current["ModifyIndex"]
    exists = await call(cluster, "PUT", "/v1/var/cas/x?cas=0", {"Items": {"v": "2"}})
    assert (exists.status_code, exists.json()) == (409, current), "cas=0: only if it does not exist"
    assert (await call(cluster, "PUT", "/v1/var/cas/new?cas=0", {"Items": {"v": "1"}})).status_code == 200
    applied = await call(cluster, "PUT", f"/v1/var/cas/x?cas={current['ModifyIndex']}", {"Items": {"v": "2"}})
    assert applied.status_code == 200
    assert applied.json()["Items"] == {"v": "2"}
    absent = await call(cluster, "PUT", "/v1/var/cas/absent?cas=7", {"Items": {"v": "1"}})
    assert absent.status_code == 409
    assert absent.json() == {
        "Namespace": "default",
        "Path": "cas/absent",
        "CreateIndex": 0,
        "CreateTime": 0,
        "ModifyIndex": 0,
        "ModifyTime": 0,
    }, "a zero variable when the expected one does not exist"


async def test_delete_answers_204_and_honours_check_and_set(cluster: SimulatedCluster) -> None:
    current = (await call(cluster, "PUT", "/v1/var/del/x", {"Items": {"v": "1"}})).json()
    stale = await call(cluster, "DELETE", "/v1/var/del/x?cas=1")
    assert (stale.status_code, stale.json()) == (409, current)
    deleted = await call(cluster, "DELETE", f"/v1/var/del/x?cas={current['ModifyIndex']}")
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert int(deleted.headers["X-Nomad-Index"]) > current["ModifyIndex"]
    assert (await call(cluster, "GET", "/v1/var/del/x")).status_code == 404
    assert (await call(cluster, "DELETE", "/v1/var/del/x")).status_code == 204, "deleting nothing is no error"
    assert (await call(cluster, "DELETE", "/v1/var/del/x?cas=0")).status_code == 204


async def test_a_write_takes_a_raft_index_and_emits_no_event(cluster: SimulatedCluster) -> None:
    batches: list[PublishedBatch] = []
    cluster.state.subscribers.append(batches.append)
    before = cluster.state.index
    written = (await call(cluster, "PUT", "/v1/var/quiet", {"Items": {"k": "v"}})).json()
    assert written["ModifyIndex"] == before + 1
    assert [(b.index, b.events) for b in batches] == [(before + 1, ())], "Nomad has no Variables topic"


async def test_blocking_read_returns_when_the_variable_changes(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    first = (await call(cluster, "PUT", "/v1/var/watched", {"Items": {"v": "1"}})).json()
    start = trio.current_time()

    async def write_later() -> None:
        await trio.sleep(5)
        await call(cluster, "PUT", "/v1/var/watched", {"Items": {"v": "2"}}, server=1)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_later)
            read = await call(cluster, "GET", f"/v1/var/watched?index={first['ModifyIndex']}&wait=30s")
    assert trio.current_time() - start == pytest.approx(5)
    assert read.json()["Items"] == {"v": "2"}
    assert int(read.headers["X-Nomad-Index"]) > first["ModifyIndex"]


# -- locks ----------------------------------------------------------------------------------------


async def test_acquire_creates_a_locked_variable_with_go_durations(cluster: SimulatedCluster) -> None:
    response = await call(
        cluster, "PUT", "/v1/var/locks/a?lock-acquire", {"Items": {"who": "me"}, **lock("1m30s", "500ms")}
    )
    assert response.status_code == 200
    data = response.json()
    assert len(data["Lock"]["ID"]) == UUID_LENGTH
    assert (data["Lock"]["TTL"], data["Lock"]["LockDelay"]) == ("1m30s", "500ms")
    assert data["Items"] == {"who": "me"}
    assert int(response.headers["X-Nomad-Index"]) == data["ModifyIndex"]
    assert (await call(cluster, "GET", "/v1/var/locks/a")).json()["Lock"] == data["Lock"]

    defaults = (await call(cluster, "PUT", "/v1/var/locks/b?lock-acquire", {"Lock": {}})).json()
    assert (defaults["Lock"]["TTL"], defaults["Lock"]["LockDelay"]) == ("15s", "15s")
    assert "Items" not in defaults, "a lock may be taken on a variable without items"
    nanoseconds = (
        await call(cluster, "PUT", "/v1/var/locks/c?lock-acquire", {"Lock": {"TTL": 3_600_000_000_000}})
    ).json()
    assert nanoseconds["Lock"]["TTL"] == "1h0m0s"


@pytest.mark.parametrize(
    ("ttl", "status", "text"),
    [
        ("5s", 400, TTL_OUT_OF_BOUNDS),
        ("24h0m1s", 400, TTL_OUT_OF_BOUNDS),
        (
            "-20s",
            400,
            "RPC Error:: 400,2 errors occurred:\n\t* Lock delay and TTL must be positive"
            "\n\t* TTL must be between 10 seconds and 24 hours\n\n",
        ),
        ("soon", 400, 'time: invalid duration "soon"'),
    ],
)
async def test_acquire_refuses_a_ttl_out_of_nomads_bounds(
    cluster: SimulatedCluster, ttl: str, status: int, text: str
) -> None:
    response = await call(cluster, "PUT", "/v1/var/locks/bad?lock-acquire", lock(ttl=ttl))
    assert (response.status_code, response.text) == (status, text)
    assert (await call(cluster, "GET", "/v1/var/locks/bad")).status_code == 404, "nothing was written"


async def test_lock_operations_take_no_check_and_set(cluster: SimulatedCluster) -> None:
    response = await call(cluster, "PUT", "/v1/var/locks/cas?lock-acquire&cas=0", lock())
    assert (response.status_code, response.text) == (400, "CAS can't be used with lock operations")


async def test_a_held_lock_refuses_other_acquires_and_writes_with_409(cluster: SimulatedCluster) -> None:
    holder = await acquire(cluster, "locks/held")
    other = await call(cluster, "PUT", "/v1/var/locks/held?lock-acquire", {"Items": {"x": "y"}, **lock()})
    assert other.status_code == 409
    assert other.json() == zero_variable("locks/held"), "a held lock's variable is not shown"
    write = await call(cluster, "PUT", "/v1/var/locks/held", {"Items": {"x": "y"}})
    assert write.status_code == 409, "a locked variable is written only with its lock's ID"
    with_durations = {"Items": {"x": "y"}, **lock(lock_id=holder)}
    refused = await call(cluster, "PUT", "/v1/var/locks/held", with_durations)
    assert (refused.status_code, refused.text) == (
        400,
        "RPC Error:: 400,RPC Error:: 400,variable should not contain lock definition",
    ), "a plain write names the lock by its ID only"
    owned = await call(cluster, "PUT", "/v1/var/locks/held", {"Items": {"x": "y"}, "Lock": {"ID": holder}})
    assert owned.status_code == 200
    assert owned.json()["Lock"]["ID"] == holder, "the holder's write keeps the lock"
    assert (await call(cluster, "DELETE", "/v1/var/locks/held")).status_code == 409
    assert (await call(cluster, "GET", "/v1/var/locks/held")).json()["Items"] == {"x": "y"}


async def test_release_frees_the_lock_at_once_without_delay(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    with trio.fail_after(10):
        first = await acquire(cluster, "locks/free", delay="1m")
        start = trio.current_time()
        released = await call(cluster, "PUT", "/v1/var/locks/free?lock-release", {"Lock": {"ID": first}})
        assert released.status_code == 200
        assert "Lock" not in released.json()
        assert "Items" not in released.json()
        second = await acquire(cluster, "locks/free")
    assert second != first
    assert trio.current_time() == start, "no LockDelay after a voluntary release"


async def test_release_by_another_lock_id_is_refused(cluster: SimulatedCluster) -> None:
    holder = await acquire(cluster, "locks/mine")
    wrong = await call(cluster, "PUT", "/v1/var/locks/mine?lock-release", {"Lock": {"ID": "not-the-holder"}})
    assert (wrong.status_code, wrong.json()) == (409, zero_variable("locks/mine"))
    assert "X-Nomad-Index" not in wrong.headers, "a lock operation's conflict is written before it"
    with_items = await call(
        cluster, "PUT", "/v1/var/locks/mine?lock-release", {"Items": {"k": "v"}, **lock(lock_id=holder)}
    )
    assert with_items.status_code == 400
    no_id = await call(cluster, "PUT", "/v1/var/locks/mine?lock-release", {"Lock": {}})
    assert (no_id.status_code, no_id.text) == (400, "RPC Error:: 400,missing lock information")
    assert (await call(cluster, "GET", "/v1/var/locks/mine")).json()["Lock"]["ID"] == holder, "still held"

    await call(cluster, "PUT", "/v1/var/plain", {"Items": {"k": "v"}})
    unlocked = await call(cluster, "PUT", "/v1/var/plain?lock-release", {"Lock": {"ID": holder}})
    assert (unlocked.status_code, unlocked.text) == (409, "variable doesn't hold a lock")
    absent = await call(cluster, "PUT", "/v1/var/nothing?lock-release", {"Lock": {"ID": holder}})
    assert (absent.status_code, absent.text) == (404, "variable doesn't exist")


async def test_renewals_keep_the_lock_past_its_ttl(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    holder = await acquire(cluster, "locks/renewed", ttl="10s")
    acquired = (await call(cluster, "GET", "/v1/var/locks/renewed")).json()
    with trio.fail_after(120):
        for _ in range(6):
            await trio.sleep(15)  # past the TTL, within the leader's twice-the-TTL timer
            renewed = await call(cluster, "PUT", "/v1/var/locks/renewed?lock-renew", {"Lock": {"ID": holder}})
            assert renewed.status_code == 200, renewed.text
    data = renewed.json()
    assert data["Lock"]["ID"] == holder
    assert "Items" not in data, "a renewal answers the metadata"
    assert data["ModifyIndex"] == acquired["ModifyIndex"], "a renewal is no Raft write"
    assert "X-Nomad-Index" not in renewed.headers, "Nomad answers a renewal with the metadata only"
    taken = await call(cluster, "PUT", "/v1/var/locks/renewed?lock-acquire", lock())
    assert taken.status_code == 409


async def test_a_lapsed_lock_refuses_renewal_and_blocks_acquires_for_its_delay(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    """TTL 10 s, LockDelay 30 s: the leader's timer fires at 2 x TTL = 20 s, the lock goes at 50 s."""
    holder = await acquire(cluster, "locks/lapsing", ttl="10s", delay="30s")
    start = trio.current_time()
    held = (await call(cluster, "GET", "/v1/var/locks/lapsing")).json()

    async def at(seconds: float) -> None:
        await trio.sleep_until(start + seconds)

    with trio.fail_after(120):
        await at(19.5)
        assert (await call(cluster, "PUT", "/v1/var/locks/lapsing?lock-acquire", lock())).status_code == 409
        await at(20.5)
        renewal = await call(cluster, "PUT", "/v1/var/locks/lapsing?lock-renew", {"Lock": {"ID": holder}})
        assert (renewal.status_code, renewal.text) == (409, "attempting to modify locked variable")
        assert (await call(cluster, "PUT", "/v1/var/locks/lapsing?lock-acquire", lock())).status_code == 409
        assert (await call(cluster, "GET", "/v1/var/locks/lapsing")).json()["Lock"]["ID"] == holder
        await at(49.5)
        assert (await call(cluster, "PUT", "/v1/var/locks/lapsing?lock-acquire", lock())).status_code == 409
        await at(50.5)
        freed = (await call(cluster, "GET", "/v1/var/locks/lapsing")).json()
        assert "Lock" not in freed
        assert freed["ModifyIndex"] > held["ModifyIndex"]
        assert freed["ModifyTime"] == held["ModifyTime"], "the expiry write keeps the holder's time"
        late = await call(cluster, "PUT", "/v1/var/locks/lapsing?lock-renew", {"Lock": {"ID": holder}})
        assert (late.status_code, late.text) == (409, "variable doesn't hold a lock")
        assert await acquire(cluster, "locks/lapsing") != holder
    assert trio.current_time() == pytest.approx(start + 50.5)


async def test_renewing_a_variable_that_does_not_exist_is_404(cluster: SimulatedCluster) -> None:
    response = await call(cluster, "PUT", "/v1/var/nowhere?lock-renew", {"Lock": {"ID": "x"}})
    assert (response.status_code, response.text) == (404, "variable doesn't exist")


# -- server restarts ------------------------------------------------------------------------------


async def test_variables_and_locks_survive_a_leader_restart(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    """Raft state outlives the leader; its lock timers do not, and the new leader starts each one
    afresh (``restoreLockTTLTimers``), so a lock that would have lapsed at 20 s is renewable at 30 s."""
    holder = await acquire(cluster, "locks/raft", ttl="10s")
    before = (await call(cluster, "GET", "/v1/var/locks/raft")).json()
    start = trio.current_time()
    old_leader = cluster.leader
    with trio.fail_after(120):
        await trio.sleep_until(start + 15)
        restart = await call(
            cluster, "POST", f"/sim/v1/servers/{old_leader}/restart", {"downtime_s": 20}, server=1
        )
        assert restart.json()["was_leader"] is True
        await trio.sleep(0.1)
        during = await call(cluster, "PUT", "/v1/var/locks/other", {"Items": {"k": "v"}}, server=1)
        assert (during.status_code, during.text) == (500, "No cluster leader")
        await trio.sleep(cluster.config.election_timeout)
        assert cluster.leader not in (None, old_leader)
        survivor = next(i for i, s in enumerate(cluster.servers) if s.name == cluster.leader)
        assert (await call(cluster, "GET", "/v1/var/locks/raft", server=survivor)).json() == before
        await trio.sleep_until(start + 30)
        renewed = await call(
            cluster, "PUT", "/v1/var/locks/raft?lock-renew", {"Lock": {"ID": holder}}, server=survivor
        )
        assert renewed.status_code == 200, "the new leader's timer started at its election"
        await trio.sleep_until(start + 40)
        assert (await call(cluster, "GET", "/v1/var/locks/raft")).json() == before, (
            "the old leader serves again"
        )


async def test_a_follower_restart_leaves_the_lock_timers_alone(
    autojump_clock: trio.abc.Clock, cluster: SimulatedCluster
) -> None:
    holder = await acquire(cluster, "locks/follower", ttl="10s", delay="10s")
    start = trio.current_time()
    follower = next(s.name for s in cluster.servers if s.name != cluster.leader)
    with trio.fail_after(60):
        await call(cluster, "POST", f"/sim/v1/servers/{follower}/restart", {"downtime_s": 5})
        await trio.sleep_until(start + 20.5)
        renewal = await call(cluster, "PUT", "/v1/var/locks/follower?lock-renew", {"Lock": {"ID": holder}})
        assert renewal.status_code == 409, "the leader's timer lapsed at 2 x TTL as usual"
