"""Images: a tag resolves to a digest the control API can move, a node keeps what it pulled until a
``force_pull`` task lands there, and commands see ``SIMULATED_IMAGE=name@digest``.

Deterministic: the cluster runs on the test's virtual clock (trio_mode, autojump), its servers on
127.0.0.1 port 0; ``settle`` waits on that clock with a hard cap.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import pytest
import trio_websocket

from supervisor.nomad import NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.simulator.state.images import ImageError, ImageRegistry, parse_reference

from .conftest import batch_job, settle

NEW_DIGEST = "sha256:" + "ab" * 32


def running_image(cluster: SimulatedCluster, job_id: str) -> str:
    (alloc,) = [a for a in cluster.state.allocs_by_job[("default", job_id)].values() if not a.terminal]
    return alloc.images["default-task"]


def job(job_id: str, image: str, *, force_pull: bool | None = None) -> dict[str, Any]:
    spec = batch_job(job_id)
    config = spec["TaskGroups"][0]["Tasks"][0]["Config"]
    config["image"] = image
    if force_pull is not None:
        config["force_pull"] = force_pull
    return spec


async def run(cluster: SimulatedCluster, client: NomadClient, spec: dict[str, Any]) -> str:
    await client.register_job(spec)
    job_id = spec["ID"]
    await settle(
        cluster,
        lambda: any(
            a.client_status == "running"
            for a in cluster.state.allocs_by_job.get(("default", job_id), {}).values()
        ),
    )
    return running_image(cluster, job_id)


async def push(cluster: SimulatedCluster, body: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        return await http.post("/sim/v1/images", json=body)


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=1)])
async def test_a_node_keeps_the_digest_it_pulled_until_a_force_pull_task_lands_there(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    first = await run(cluster, client, job("first", "openhpi/co_execenv_python:3.8"))
    original = "sha256:" + hashlib.sha256(b"openhpi/co_execenv_python:3.8").hexdigest()
    assert first == f"openhpi/co_execenv_python@{original}"

    response = await push(cluster, {"image": "openhpi/co_execenv_python:3.8", "digest": NEW_DIGEST})
    assert response.status_code == 200
    assert response.json() == {
        "image": "openhpi/co_execenv_python:3.8",
        "previous": original,
        "digest": NEW_DIGEST,
    }
    assert await run(cluster, client, job("cached", "openhpi/co_execenv_python:3.8")) == first
    assert (
        await run(cluster, client, job("not-forced", "openhpi/co_execenv_python:3.8", force_pull=False))
        == first
    )
    pulled = await run(cluster, client, job("forced", "openhpi/co_execenv_python:3.8", force_pull=True))
    assert pulled == f"openhpi/co_execenv_python@{NEW_DIGEST}"
    # The node has the new image now: a task without force_pull runs it too.
    assert await run(cluster, client, job("after", "openhpi/co_execenv_python:3.8")) == pulled

    async with httpx.AsyncClient(base_url=cluster.addresses[0]) as http:
        state = (await http.get("/sim/v1/state")).json()
    node = next(iter(cluster.state.nodes.values()))
    assert state["images"]["tags"] == {"openhpi/co_execenv_python:3.8": NEW_DIGEST}
    assert state["images"]["nodes"][node.name] == {"openhpi/co_execenv_python:3.8": NEW_DIGEST}
    first_alloc = next(a for a in cluster.state.allocs.values() if a.job_id == "first")
    assert state["images"]["allocations"][first_alloc.id] == {"default-task": first}


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=2)])
async def test_a_node_that_never_pulled_the_image_pulls_the_current_digest(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    node_ids = sorted(cluster.state.nodes)
    pinned = job("on-first", "python")
    pinned["Constraints"] = [{"LTarget": "${node.unique.id}", "RTarget": node_ids[0], "Operand": "="}]
    before = await run(cluster, client, pinned)
    assert before.startswith("python@sha256:"), "no tag is :latest, and the name is kept without it"
    assert (await push(cluster, {"image": "python", "digest": NEW_DIGEST})).status_code == 200
    other = job("on-second", "python:latest")
    other["Constraints"] = [{"LTarget": "${node.unique.id}", "RTarget": node_ids[1], "Operand": "="}]
    assert await run(cluster, client, other) == f"python@{NEW_DIGEST}"


@pytest.mark.parametrize("sim_config", [SimConfig(seed=7, nodes=1)])
async def test_a_latest_tag_is_pulled_at_every_start_as_the_docker_driver_does(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    first = await run(cluster, client, job("first", "openhpi/docker_exec_phusion"))
    assert (
        await push(cluster, {"image": "openhpi/docker_exec_phusion", "digest": NEW_DIGEST})
    ).status_code == 200
    later = await run(cluster, client, job("later", "openhpi/docker_exec_phusion:latest", force_pull=False))
    assert first != later
    assert later == f"openhpi/docker_exec_phusion@{NEW_DIGEST}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"image": "python:3.12", "digest": "sha256:abc"}, "64 lowercase hex digits"),
        ({"image": "python:3.12", "digest": "md5:" + "ab" * 32}, "digest must be sha256:"),
        ({"image": "", "digest": NEW_DIGEST}, "image must be a non-empty string"),
        ({"image": "Python:3", "digest": NEW_DIGEST}, "invalid reference format"),
        ({"image": "python:3 12", "digest": NEW_DIGEST}, "invalid tag"),
        ({"image": f"python@{NEW_DIGEST}", "digest": NEW_DIGEST}, "a digest reference cannot be moved"),
        ({"image": "python:3.12", "digest": NEW_DIGEST, "tag": "x"}, "unknown field 'tag'"),
        ([1], "request body must be a JSON object"),
    ],
)
async def test_a_bad_push_is_a_400_with_a_message(cluster: SimulatedCluster, body: Any, message: str) -> None:
    response = await push(cluster, body)
    assert response.status_code == 400
    assert message in response.text


async def test_commands_see_the_image_their_task_runs(cluster: SimulatedCluster, client: NomadClient) -> None:
    image = await run(cluster, client, job("env", "python:3.12-slim"))
    alloc = next(a for a in cluster.state.allocs.values() if a.job_id == "env")
    command = json.dumps(["sh", "-c", 'printf %s "$SIMULATED_IMAGE"'])
    query = urlencode({"task": "default-task", "command": command, "tty": "false"})
    url = cluster.addresses[0].replace("http", "ws") + f"/v1/client/allocation/{alloc.id}/exec?{query}"
    output = b""
    async with trio_websocket.open_websocket_url(url) as ws:
        with pytest.raises(trio_websocket.ConnectionClosed):
            while True:
                frame = orjson.loads(await ws.get_message())
                output += base64.b64decode(frame.get("stdout", {}).get("data", ""))
    assert output.decode() == image


def test_references_are_read_as_docker_reads_them() -> None:
    assert parse_reference("python") == ("python", "latest")
    assert parse_reference("localhost:5000/co/python:3.8") == ("localhost:5000/co/python", "3.8")
    assert parse_reference(f"python@{NEW_DIGEST}") == ("python", NEW_DIGEST)
    registry = ImageRegistry()
    assert registry.run_on("n", f"python@{NEW_DIGEST}", force_pull=False) == f"python@{NEW_DIGEST}"
    with pytest.raises(ImageError, match="invalid reference format"):
        parse_reference("UPPER/case")
