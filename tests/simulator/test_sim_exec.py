"""Exec in the simulated cluster: real local processes behind Nomad's frames (real clock)."""

from __future__ import annotations

import hashlib
import json
import os
from urllib.parse import urlencode

import orjson
import pytest
import trio
import trio_websocket

from supervisor.base.errors import ExecConnectionLost, ExecRejected, NomadUnavailableError
from supervisor.nomad import ExecExited, NomadClient
from supervisor.simulator import SimConfig, SimulatedCluster

from .conftest import batch_job, make_client, settle

TASK = "default-task"


async def running_alloc(cluster: SimulatedCluster, client: NomadClient, job_id: str = "exec-1") -> str:
    restart = {"Attempts": 3, "Interval": 3600 * 10**9, "Delay": 10**8, "Mode": "fail"}
    await client.register_job(batch_job(job_id, restart=restart))
    await settle(
        cluster,
        lambda: any(
            a.client_status == "running"
            for a in cluster.state.allocs_by_job.get(("default", job_id), {}).values()
        ),
    )
    return next(a.id for a in cluster.state.allocs_by_job[("default", job_id)].values())


async def test_frames_exit_zero_and_no_close_frame(cluster: SimulatedCluster, client: NomadClient) -> None:
    alloc_id = await running_alloc(cluster, client)
    query = urlencode(
        {"task": TASK, "command": json.dumps(["sh", "-c", "cat; echo err >&2"]), "tty": "false"}
    )
    url = cluster.addresses[0].replace("http", "ws") + f"/v1/client/allocation/{alloc_id}/exec?{query}"
    frames = []
    async with trio_websocket.open_websocket_url(url) as ws:
        await ws.send_message(orjson.dumps({"stdin": {"data": "aGkK"}}).decode())
        await ws.send_message(orjson.dumps({"stdin": {"close": True}}).decode())
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            while True:
                frames.append(orjson.loads(await ws.get_message()))
    assert closed.value.reason is not None
    assert closed.value.reason.code == 1006, "Nomad drops the connection without a close frame"
    assert frames[-1] == {"exited": True, "result": {}}, "exit code 0 is an empty result"
    assert {"stdout": {"data": "aGkK"}} in frames
    assert {"stdout": {"close": True}} in frames
    assert {"stderr": {"close": True}} in frames


async def test_stdin_frames_larger_than_one_read_arrive_whole(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    data = os.urandom(300_000)  # one frame of 400 KB of base64: many TCP reads on the server
    async with client.open_exec(alloc_id, task=TASK, command=["sh", "-c", "sha256sum"]) as session:
        await session.send_stdin(data)
        await session.close_stdin()
        exited, stdout, _ = await session.wait_exit()
    assert exited.exit_code == 0
    assert stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()


async def test_environment_is_path_and_nomads_variables_only(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    os.environ["SIMULATOR_TEST_SECRET"] = "host-only"
    try:
        async with client.open_exec(alloc_id, task=TASK, command=["env"]) as session:
            exited, stdout, _ = await session.wait_exit()
    finally:
        del os.environ["SIMULATOR_TEST_SECRET"]
    names = {line.split("=", 1)[0] for line in stdout.decode().splitlines()}
    assert exited.exit_code == 0
    assert "SIMULATOR_TEST_SECRET" not in names
    assert "PATH" in names
    assert "NOMAD_ALLOC_ID" in names
    assert names <= {"PATH", "HOME", "TMPDIR", "PWD", "SHLVL", "_", "SIMULATED_IMAGE"} | {
        n for n in names if n.startswith("NOMAD_")
    }


async def test_process_runs_in_the_allocations_directory(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    async with client.open_exec(
        alloc_id, task=TASK, command=["sh", "-c", "echo kept > f.txt; pwd"]
    ) as session:
        _, stdout, _ = await session.wait_exit()
    workspace = stdout.decode().strip()
    assert workspace.endswith(f"{alloc_id}/{TASK}")
    assert await trio.Path(workspace, "f.txt").read_text() == "kept\n"


@pytest.mark.parametrize(
    ("alloc", "task", "reason"),
    [
        ("unknown", TASK, 'Unknown allocation "unknown"'),
        ("known", "web", 'unknown task name "web"'),
    ],
)
async def test_refusals_are_close_frames_with_nomads_text(
    cluster: SimulatedCluster, client: NomadClient, alloc: str, task: str, reason: str
) -> None:
    alloc_id = await running_alloc(cluster, client) if alloc == "known" else alloc
    with pytest.raises(ExecRejected) as caught:
        async with client.open_exec(alloc_id, task=task, command=["true"]) as session:
            await session.receive()
    assert caught.value.code == 1008
    assert caught.value.reason == reason


async def test_task_not_running_after_its_allocation_stopped(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    await client.deregister_job("exec-1")
    await settle(cluster, lambda: cluster.state.allocs[alloc_id].client_status == "complete")
    with pytest.raises(ExecRejected, match=r"client status of allocation .* is complete"):
        async with client.open_exec(alloc_id, task=TASK, command=["true"]) as session:
            await session.receive()


async def test_bad_command_fails_before_the_upgrade_up_to_nomad_2_0_2(
    cluster: SimulatedCluster, client: NomadClient, nursery: trio.Nursery
) -> None:
    alloc_id = await running_alloc(cluster, client)
    with pytest.raises(NomadUnavailableError, match="command is not present"):
        async with client.open_exec(alloc_id, task=TASK, command=[]):
            pass  # pragma: no cover
    newer = await nursery.start(SimulatedCluster(SimConfig(nomad_version="2.0.3")).run)
    async with make_client(newer) as newer_client:
        newer_alloc = await running_alloc(newer, newer_client)
        with pytest.raises(ExecRejected, match="command is not present"):
            async with newer_client.open_exec(newer_alloc, task=TASK, command=[]) as session:
                await session.receive()


async def test_stopping_the_allocation_kills_the_command(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    async with client.open_exec(alloc_id, task=TASK, command=["sleep", "600"]) as session:
        with trio.fail_after(10):
            await client.deregister_job("exec-1")
            exited, _, _ = await session.wait_exit()
    assert exited == ExecExited(exit_code=137)


async def test_a_server_restart_drops_its_execs_without_an_exit_and_the_command_runs_on(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    with pytest.raises(ExecConnectionLost):
        async with client.open_exec(
            alloc_id, task=TASK, command=["sh", "-c", "echo started; sleep 600"]
        ) as session:
            first = await session.receive()
            assert first.data == b"started\n"  # type: ignore[union-attr]
            cluster.restart_server("server-1", downtime=0.5)
            await session.receive()
    assert cluster.execs.count == 1, "as with Nomad, the command outlives its session"
    await settle(cluster, lambda: cluster.leader is not None)
    await client.deregister_job("exec-1", purge=True)
    await settle(cluster, lambda: cluster.execs.count == 0)


async def test_restarted_task_gets_a_fresh_workspace(cluster: SimulatedCluster, client: NomadClient) -> None:
    alloc_id = await running_alloc(cluster, client)
    async with client.open_exec(alloc_id, task=TASK, command=["sh", "-c", "echo x > data"]) as session:
        await session.wait_exit()
    cluster.agents.fail(cluster.state.allocs[alloc_id], "crash")
    await settle(cluster, lambda: cluster.state.allocs[alloc_id].client_status == "running", within=60)
    async with client.open_exec(alloc_id, task=TASK, command=["ls"]) as session:
        _, stdout, _ = await session.wait_exit()
    assert stdout == b""
