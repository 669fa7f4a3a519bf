"""The simulated cluster at the edges a real client hits, answered as Nomad 1.10.5 answers them
(nomad-api.md §9): query booleans and options through Go's parsers, request bodies through Go's
``encoding/json``, job registration canonicalized and validated, variables' errors since 1.8,
unknown objects, and Go's status lines. One test per rule, over real HTTP.

Rules of these tests: pytest-trio's ``trio_mode``; ``autojump_clock`` wherever time passes, with
the expected ``trio.current_time()`` asserted and the test capped by ``trio.fail_after`` on the
virtual clock; the cluster's servers listen on 127.0.0.1, port 0, started with ``nursery.start``.
"""

from __future__ import annotations

from typing import Any

import httpx
import nomad
import orjson
import pytest
import trio

from supervisor.simulator import SimulatedCluster

from .conftest import batch_job, settle

_SECOND = 1_000_000_000


@pytest.fixture(autouse=True)
def _python_nomad_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """python-nomad reads NOMAD_* variables; the outside client talks to the test's cluster only."""
    for name in ("NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_NAMESPACE", "NOMAD_REGION"):
        monkeypatch.delenv(name, raising=False)


async def call(cluster: SimulatedCluster, method: str, path: str, body: Any = None) -> httpx.Response:
    """One request; ``body`` as bytes is sent as it is, anything else as JSON."""
    content = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
    async with httpx.AsyncClient(base_url=cluster.addresses[0], timeout=600) as http:
        return await http.request(method, path, content=content)


def running(cluster: SimulatedCluster, job_id: str) -> bool:
    allocs = cluster.state.allocs_by_job.get(("default", job_id), {}).values()
    return any(a.client_status == "running" for a in allocs)


def written(cluster: SimulatedCluster) -> tuple[object, ...]:
    """What the write routes under test can change: jobs, variables, nodes' drain and eligibility."""
    state = cluster.state
    return (
        {key: job.job_modify_index for key, job in state.jobs.items()},
        {key: variable.modify_index for key, variable in state.variables.items()},
        {node.id: (node.eligibility, node.drain_strategy) for node in state.nodes.values()},
    )


def one_task_job(job_id: str, **fields: Any) -> dict[str, Any]:
    """The smallest job Nomad takes: one group of one task, every other field left to Nomad."""
    task = {"Name": "t", "Driver": "docker", "Config": {"image": "busybox"}}
    return {"ID": job_id, "TaskGroups": [{"Name": "g", "Tasks": [task]}], **fields}


async def test_query_booleans_parse_as_go_parse_bool(cluster: SimulatedCluster) -> None:
    await call(cluster, "PUT", "/v1/jobs", {"Job": batch_job("flagged", meta={"group": "meta"})})
    job = batch_job("with-meta")
    job["Meta"] = {"pool": "a"}
    await call(cluster, "PUT", "/v1/jobs", {"Job": job})
    await settle(cluster, lambda: running(cluster, "with-meta"))
    for true in ("1", "t", "T", "TRUE", "true", "True"):
        stubs = (await call(cluster, "GET", f"/v1/jobs?meta={true}&prefix=with")).json()
        assert stubs[0]["Meta"] == {"pool": "a"}, true
    for false in ("0", "f", "F", "FALSE", "false", "False"):
        assert "Meta" not in (await call(cluster, "GET", f"/v1/jobs?meta={false}&prefix=with")).json()[0]
    refused = await call(cluster, "GET", "/v1/jobs?meta=x")
    assert (refused.status_code, refused.text) == (
        500,
        'Failed to parse value of "meta" (x) as a bool: strconv.ParseBool: parsing "x": invalid syntax',
    )

    stub = (await call(cluster, "GET", "/v1/allocations?resources=True&task_states=False")).json()[0]
    assert "AllocatedResources" in stub
    assert stub["TaskStates"] is None
    assert (await call(cluster, "GET", "/v1/allocations?task_states=yes")).status_code == 500
    junk = await call(cluster, "GET", "/v1/job/with-meta/allocations?all=junk")
    assert junk.status_code == 200, "the agent ignores ParseBool's error for all="
    assert (await call(cluster, "GET", "/v1/node/x?stale")).status_code == 404, "stale without a value"
    stale = await call(cluster, "GET", "/v1/jobs?stale=bogus")
    assert (stale.status_code, stale.text) == (
        400,
        "Expect `true` or `false` for `stale` query string parameter",
    )

    kept = await call(cluster, "DELETE", "/v1/job/flagged?purge=maybe")
    assert kept.status_code == 500
    assert kept.text.startswith('Failed to parse value of "purge" (maybe) as a bool')
    assert ("default", "flagged") in cluster.state.jobs, "nothing was done"

    # python-nomad sends Python's True and False.
    host, port = cluster.addresses[0].removeprefix("http://").split(":")
    outside = nomad.Nomad(host=host, port=int(port), timeout=30)
    jobs = await trio.to_thread.run_sync(lambda: outside.jobs.get_jobs(prefix="with", meta=True))
    assert jobs[0]["Meta"] == {"pool": "a"}
    await trio.to_thread.run_sync(lambda: outside.job.deregister_job("flagged", purge=True))
    assert ("default", "flagged") not in cluster.state.jobs, "purge=True purges"


async def test_query_options_parse_as_nomads_agent(
    cluster: SimulatedCluster, autojump_clock: trio.abc.Clock
) -> None:
    for query, text in (
        ("index=-1", "Invalid index"),
        ("index=x", "Invalid index"),
        ("index=+5", "Invalid index"),
        ("index=1&wait=soon", "Invalid wait time"),
        ("index=1&wait=5", "Invalid wait time"),
        ("per_page=x", "Expect a number for `per_page` query string parameter"),
        ("per_page=x&index=x", "Expect a number for `per_page` query string parameter"),
    ):
        response = await call(cluster, "GET", f"/v1/jobs?{query}")
        assert (response.status_code, response.text) == (400, text), query
    bad_filter = await call(cluster, "GET", "/v1/allocations?filter=ClientStatus ==")
    assert bad_filter.status_code == 400
    assert bad_filter.text.startswith("failed to create result paginator: failed to read filter expression: ")
    on_vars = await call(cluster, "GET", "/v1/vars?index=x")
    assert (on_vars.status_code, on_vars.text) == (400, "Invalid indexfailed to parse parameters"), (
        "the variables endpoint writes its own error after the parser's"
    )

    with trio.fail_after(400):
        start = trio.current_time()
        waited = await call(cluster, "GET", "/v1/jobs?index=1&wait=0")
        elapsed = trio.current_time() - start
    assert waited.status_code == 200, "wait=0 is a Go duration: Nomad's default wait, 300 s"
    assert 300 <= elapsed <= 300 * 17 / 16


async def test_bodies_are_decoded_as_go_decodes_them(cluster: SimulatedCluster) -> None:
    node = next(iter(cluster.state.nodes.values()))
    refusals = [
        ("PUT", "/v1/jobs", b"", "Request body is empty"),
        ("PUT", "/v1/jobs", b"  ", "EOF"),
        ("PUT", "/v1/jobs", b'{"Job": {"ID": "cut"', "unexpected EOF"),
        (
            "PUT",
            "/v1/jobs",
            b"[]",
            "json: cannot unmarshal array into Go value of type api.JobRegisterRequest",
        ),
        (
            "PUT",
            "/v1/jobs",
            {"Job": one_task_job("typed", Priority="5")},
            "json: cannot unmarshal string into Go struct field Job.Job.Priority of type int",
        ),
        (
            "PUT",
            "/v1/jobs",
            {"Job": {"ID": "typed", "TaskGroups": [{"Name": "g", "Count": 1.5}]}},
            "json: cannot unmarshal number 1.5 into Go struct field TaskGroup.Job.TaskGroups.Count "
            "of type int",
        ),
        (
            "POST",
            f"/v1/node/{node.id}/drain",
            {"DrainSpec": {"Deadline": "1h"}},
            "json: cannot unmarshal string into Go struct field DrainSpec.DrainSpec.Deadline "
            "of type time.Duration",
        ),
        (
            "POST",
            f"/v1/node/{node.id}/eligibility",
            {"Eligibility": 1},
            "json: cannot unmarshal number into Go struct field NodeUpdateEligibilityRequest.Eligibility "
            "of type string",
        ),
        (
            "PUT",
            "/v1/var/typed",
            {"Items": {"k": 1}},
            "json: cannot unmarshal number into Go struct field VariableDecrypted.Items of type string",
        ),
        (
            "PUT",
            "/v1/var/typed?lock-acquire",
            {"Lock": {"ID": 5}},
            "json: cannot unmarshal number into Go struct field VariableDecrypted.Lock.ID of type string",
        ),
    ]
    before = written(cluster)
    for method, path, body, text in refusals:
        response = await call(cluster, method, path, body)
        assert (response.status_code, response.text) == (400, text), (path, body)
    assert written(cluster) == before, "nothing was written"

    # No body makes a handler fail: each is answered, and a refused write writes nothing.
    odd_bodies = [b"{", b"null", b"1", b'"x"', b"{}", b'{"Job": []}', b'{"Job": {"TaskGroups": [null]}}']
    odd_bodies += [b'{"Job": {"ID": "n", "TaskGroups": [{"Tasks": [null, {}]}]}}', b'{"Lock": null}']
    odd_bodies += [b'{"DrainSpec": 5}', b'{"Items": null, "Lock": {"TTL": true}}', b"\xff\xfe"]
    routes = ["/v1/jobs", f"/v1/node/{node.id}/drain", f"/v1/node/{node.id}/eligibility", "/v1/var/odd"]
    routes += ["/v1/var/odd?lock-acquire", "/v1/var/odd?lock-release", "/v1/var/odd?lock-renew"]
    for route in routes:
        for body in odd_bodies:
            before = written(cluster)
            response = await call(cluster, "PUT", route, body)
            assert response.status_code in (200, 400, 404, 409, 500), (route, body)
            assert "internal error" not in response.text, (route, body)
            if response.status_code != 200:
                assert written(cluster) == before, (route, body, "a refused write wrote")

    lowercase = await call(cluster, "PUT", "/v1/jobs", {"job": {"id": "lower", "type": "batch", **_groups()}})
    assert lowercase.status_code == 200, "Go matches keys without regard to case"


def _groups() -> dict[str, Any]:
    task = {"name": "t", "driver": "docker", "config": {"image": "python:3.12-slim"}}
    return {"taskgroups": [{"name": "g", "tasks": [task]}]}


async def test_job_registration_checks_canonicalizes_and_validates_as_nomad(
    cluster: SimulatedCluster,
) -> None:
    for path, body, text in (
        ("/v1/jobs", {}, "Job must be specified"),
        ("/v1/jobs", {"Job": {"Type": "batch"}}, "Job ID hasn't been provided"),
        ("/v1/job/a", {"Job": one_task_job("b")}, "Job ID does not match name"),
    ):
        response = await call(cluster, "PUT", path, body)
        assert (response.status_code, response.text) == (400, text)

    invalid = [
        (one_task_job("zero", Priority=0), ["job priority must be between [1, 100]"]),
        (one_task_job("a b", Type="x"), ["Job ID contains a space", 'Invalid job type: "x"']),
        ({"ID": "empty", "Type": "batch"}, ["Missing job task groups"]),
        (one_task_job("dc", Datacenters=[""]), ["Job datacenter must be non-empty string"]),
        (
            {"ID": "driverless", "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t"}]}]},
            [
                "Task group g validation failed: 1 error occurred:\n\t* Task t validation failed: "
                "1 error occurred:\n\t* Missing task driver\n\n\n\n"
            ],
        ),
    ]
    for job, errors in invalid:
        response = await call(cluster, "PUT", "/v1/jobs", {"Job": job})
        heading = "1 error occurred:" if len(errors) == 1 else f"{len(errors)} errors occurred:"
        expected = heading + "".join(f"\n\t* {e}" for e in errors) + "\n\n"
        assert (response.status_code, response.text) == (500, expected), job["ID"]
    assert cluster.state.jobs == {}, "nothing invalid was registered"

    assert (
        await call(cluster, "PUT", "/v1/jobs", {"Job": one_task_job("canon", Type="batch")})
    ).status_code == 200
    job = (await call(cluster, "GET", "/v1/job/canon")).json()
    assert (job["Priority"], job["Datacenters"], job["NodePool"], job["Region"]) == (
        50,
        ["*"],
        "default",
        "global",
    )
    assert job["Update"] == {
        "AutoPromote": False,
        "AutoRevert": False,
        "Canary": 0,
        "HealthCheck": "",
        "HealthyDeadline": 0,
        "MaxParallel": 0,
        "MinHealthyTime": 0,
        "ProgressDeadline": 0,
        "Stagger": 0,
    }
    group = job["TaskGroups"][0]
    assert group["Count"] == 1
    assert group["RestartPolicy"] == {
        "Attempts": 3,
        "Delay": 15 * _SECOND,
        "Interval": 24 * 3600 * _SECOND,
        "Mode": "fail",
        "RenderTemplates": False,
    }
    assert group["ReschedulePolicy"] == {
        "Attempts": 1,
        "Delay": 5 * _SECOND,
        "DelayFunction": "constant",
        "Interval": 24 * 3600 * _SECOND,
        "MaxDelay": 0,
        "Unlimited": False,
    }
    assert group["EphemeralDisk"] == {"Migrate": False, "SizeMB": 300, "Sticky": False}
    assert (group["Migrate"], group["Update"]) == (None, None), "a batch job has neither"
    task = group["Tasks"][0]
    assert (task["Resources"]["CPU"], task["Resources"]["MemoryMB"]) == (100, 300)
    assert task["KillTimeout"] == 5 * _SECOND
    assert task["LogConfig"] == {"Disabled": False, "MaxFileSizeMB": 10, "MaxFiles": 10}
    assert task["RestartPolicy"] == group["RestartPolicy"]
    assert task["Identity"]["Name"] == "default"

    assert (await call(cluster, "PUT", "/v1/jobs", {"Job": one_task_job("svc")})).status_code == 200
    service = (await call(cluster, "GET", "/v1/job/svc")).json()
    assert service["Type"] == "service"
    assert (service["Update"]["MaxParallel"], service["Update"]["Stagger"]) == (1, 30 * _SECOND)
    svc_group = service["TaskGroups"][0]
    assert svc_group["Update"]["HealthCheck"] == "checks"
    assert svc_group["Migrate"] == {
        "HealthCheck": "checks",
        "HealthyDeadline": 300 * _SECOND,
        "MaxParallel": 1,
        "MinHealthyTime": 10 * _SECOND,
    }
    assert svc_group["ReschedulePolicy"]["Unlimited"] is True
    again = await call(cluster, "PUT", "/v1/jobs", {"Job": one_task_job("svc", Priority=50, Type="service")})
    assert again.status_code == 200
    assert (await call(cluster, "GET", "/v1/job/svc")).json()["Version"] == 0, (
        "the defaults spelled out are the same job: no new version"
    )


async def test_variable_errors_are_answered_as_nomad_1_8_does(cluster: SimulatedCluster) -> None:
    items = {"Items": {"k": "v"}}
    for path, body, text in (
        ("/v1/var/a.b", items, 'RPC Error:: 400,invalid path "a.b"'),
        (
            "/v1/var/nomad",
            items,
            'RPC Error:: 400,"nomad" is a reserved top-level directory path, but you may write variables '
            'to "nomad/jobs", "nomad/job-templates", or below',
        ),
        (
            "/v1/var/nomad/other",
            items,
            'RPC Error:: 400,only paths at "nomad/jobs" or "nomad/job-templates" and below are valid paths '
            'under the top-level "nomad" directory',
        ),
        ("/v1/var/all?namespace=*", items, 'RPC Error:: 400,can not target wildcard ("*")namespace'),
        (
            "/v1/var/big",
            {"Items": {"k": "v" * 65536}},
            "RPC Error:: 400,variables are limited to 64KiB in total size",
        ),
        (
            "/v1/var/short?lock-acquire",
            {"Lock": {"TTL": "9s"}},
            "RPC Error:: 400,1 error occurred:\n\t* TTL must be between 10 seconds and 24 hours\n\n",
        ),
    ):
        response = await call(cluster, "PUT", path, body)
        assert (response.status_code, response.text) == (400, text), path
    assert cluster.state.variables == {}, "nothing was written"

    created = (await call(cluster, "PUT", "/v1/var/app/config", items)).json()
    await call(cluster, "PUT", "/v1/var/app/config", {"Items": {"k": "newer"}})
    stale = await call(cluster, "PUT", f"/v1/var/app/config?cas={created['ModifyIndex']}", items)
    current = (await call(cluster, "GET", "/v1/var/app/config")).json()
    assert (stale.status_code, stale.json()) == (409, current), "409 with the conflicting variable"
    assert int(stale.headers["X-Nomad-Index"]) == current["ModifyIndex"]
    await call(cluster, "PUT", "/v1/var/app/lock?lock-acquire", {"Lock": {}})
    assert (await call(cluster, "PUT", "/v1/var/app/lock?lock-acquire", {"Lock": {}})).status_code == 409

    deleted = await call(cluster, "DELETE", "/v1/var/app/config")
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert "content-type" not in deleted.headers
    assert "X-Nomad-Index" in deleted.headers
    patched = await call(cluster, "PATCH", "/v1/var/app/config", items)
    assert (patched.status_code, patched.text) == (400, "Invalid method")
    elsewhere = await call(cluster, "PATCH", "/v1/jobs")
    assert (elsewhere.status_code, elsewhere.text) == (405, "Invalid method"), "other endpoints answer 405"


async def test_unknown_objects_are_404_with_index_headers(cluster: SimulatedCluster) -> None:
    for path, text in (
        ("/v1/job/nope", "job not found"),
        ("/v1/allocation/nope", "alloc not found"),
        ("/v1/node/nope", "node not found"),
        ("/v1/evaluation/nope", "eval not found"),
        ("/v1/var/nope", "variable not found"),
    ):
        response = await call(cluster, "GET", path)
        assert (response.status_code, response.text) == (404, text), path
        assert response.headers["content-type"].startswith("text/plain")
        assert int(response.headers["X-Nomad-Index"]) >= 1, path
        assert (response.headers["X-Nomad-KnownLeader"], response.headers["X-Nomad-LastContact"]) == (
            "true",
            "0",
        )
    unknown_node = await call(cluster, "GET", "/v1/node/nope/allocations")
    assert (unknown_node.status_code, unknown_node.json()) == (200, [])
    stop = await call(cluster, "POST", "/v1/allocation/nope/stop")
    assert (stop.status_code, stop.text) == (404, "allocation not found")

    missing = await call(cluster, "GET", "/v1/job/later")
    index = missing.headers["X-Nomad-Index"]
    async with trio.open_nursery() as nursery:
        answers: list[httpx.Response] = []

        async def block() -> None:
            answers.append(await call(cluster, "GET", f"/v1/job/later?index={index}&wait=60s"))

        nursery.start_soon(block)
        await call(cluster, "PUT", "/v1/jobs", {"Job": batch_job("later")})
    assert (answers[0].status_code, answers[0].json()["ID"]) == (200, "later"), (
        "a client blocks on an object that is about to appear with the 404's index"
    )


async def test_status_lines_carry_gos_reason_phrases(cluster: SimulatedCluster) -> None:
    await call(cluster, "PUT", "/v1/var/phrases", {"Items": {"k": "v"}})
    for method, path, body, status, phrase in (
        ("GET", "/v1/jobs", None, 200, "OK"),
        ("PUT", "/v1/jobs", b"{", 400, "Bad Request"),
        ("GET", "/v1/job/nope", None, 404, "Not Found"),
        ("DELETE", "/v1/jobs", None, 405, "Method Not Allowed"),
        ("PUT", "/v1/var/phrases?cas=1", {"Items": {"k": "w"}}, 409, "Conflict"),
        ("GET", "/v1/jobs?meta=x", None, 500, "Internal Server Error"),
        ("DELETE", "/v1/var/phrases", None, 204, "No Content"),
    ):
        response = await call(cluster, method, path, body)
        assert (response.status_code, response.reason_phrase) == (status, phrase), path
    assert "content-type" not in response.headers, "a 204 has no Content-Type"
    assert "content-length" not in response.headers
