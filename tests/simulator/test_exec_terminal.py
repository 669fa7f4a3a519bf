"""The simulated containers as CodeOcean's images: exec on a real terminal with Nomad's frames,
``/sbin/setuser``, and the command model's terminal and fifo agreeing with the real ones."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import urlencode

import orjson
import pytest
import trio
import trio_websocket

from supervisor.core.commands import execution_command, stderr_reader_command
from supervisor.nomad import NomadClient
from supervisor.simulator import SimulatedCluster
from supervisor.simulator.agents.command_model import ModelContainers
from supervisor.simulator.agents.containers import Containers, ProcessContainers

from .test_command_model import ALLOC, _run, _state
from .test_sim_exec import TASK, running_alloc


def _frame_data(frames: list[dict[str, object]], stream: str) -> bytes:
    return b"".join(
        base64.b64decode(body["data"])
        for frame in frames
        if isinstance(body := frame.get(stream), dict) and "data" in body
    )


async def test_a_tty_exec_runs_on_a_terminal_sized_by_tty_size_frames(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    script = (
        "test -t 0 && test -t 1 && test -t 2 && echo terminal; echo err >&2; "
        'read -r line; echo "got $line"; stty size; exit 3'
    )
    query = urlencode({"task": TASK, "command": json.dumps(["/bin/bash", "-c", script]), "tty": "true"})
    url = cluster.addresses[0].replace("http", "ws") + f"/v1/client/allocation/{alloc_id}/exec?{query}"
    frames = []
    async with trio_websocket.open_websocket_url(url) as ws:
        await ws.send_message(orjson.dumps({"tty_size": {"height": 40, "width": 120}}).decode())
        await ws.send_message(orjson.dumps({"stdin": {"data": "YWJjCg=="}}).decode())  # abc\n
        with pytest.raises(trio_websocket.ConnectionClosed):
            while True:
                frames.append(orjson.loads(await ws.get_message()))
    assert frames[-1] == {"exited": True, "result": {"exit_code": 3}}
    assert _frame_data(frames, "stderr") == b"", "a terminal's output is all stdout"
    output = _frame_data(frames, "stdout")
    # The echo of what is typed lands between two writes of the script, wherever the terminal
    # receives it: before, between or after "terminal" and "err".
    written = output.replace(b"got abc", b"")
    assert b"abc\r\n" in written, "typed input is echoed"
    assert b"terminal\r\nerr\r\n" in written.replace(b"abc\r\n", b"", 1), (
        "stdin, stdout and stderr are the terminal; \\n written as \\r\\n"
    )
    assert output.endswith(b"got abc\r\n40 120\r\n"), "the size of the tty_size frame"
    assert {"stdout": {"close": True}} in frames
    assert {"stderr": {"close": True}} in frames


async def test_sbin_setuser_sets_the_user_in_argv_and_in_scripts(
    cluster: SimulatedCluster, client: NomadClient
) -> None:
    alloc_id = await running_alloc(cluster, client)
    direct = ["/sbin/setuser", "user", "/bin/bash", "-c", 'echo "$USER $LOGNAME"']
    in_script = ["/bin/sh", "-c", "/sbin/setuser user sh -c 'echo $USER' && echo /sbin/setuser-not"]
    for command, expected in [(direct, b"user user\n"), (in_script, b"user\n/sbin/setuser-not\n")]:
        async with client.open_exec(alloc_id, task=TASK, command=command) as session:
            exited, stdout, stderr = await session.wait_exit()
        assert (exited.exit_code, stdout) == (0, expected), stderr
    async with client.open_exec(alloc_id, task=TASK, command=["/sbin/setuser", "user"]) as session:
        exited, _, stderr = await session.wait_exit()
    assert (exited.exit_code, stderr) == (1, b"Usage: /sbin/setuser USERNAME COMMAND [args..]\n")


async def _execution_on_a_terminal(containers: Containers, *, apart: bool) -> tuple[int, bytes, int, bytes]:
    """An execution as the daemon runs it by default (its stderr read by a second command when
    ``apart``): input typed once its first line came; its exit and output, the reader's."""
    command = "echo out; echo err >&2; cat; test -t 0 && echo tty0; test -t 2 && echo merged"
    argv = execution_command(
        command,
        {},
        execution_id="t1",
        privileged=False,
        nomad_variables=(),
        unprivileged_wrapper="/sbin/setuser user",
        stderr_apart=apart,
    )
    reader = (0, b"")
    async with trio.open_nursery() as nursery:
        if apart:

            async def read() -> None:
                nonlocal reader
                code, out, _ = await _run(containers, nursery, stderr_reader_command("t1"))
                reader = (code, out)

            nursery.start_soon(read)
        running = await containers.start(ALLOC, "default-task", argv, nursery=nursery, tty=True)
        assert running.stderr is None, "the terminal is stdout and stderr"
        assert running.stdin is not None
        assert running.stdout is not None
        output = b""
        # Typed only once the command wrote all it writes before it reads: the terminal echoes at
        # once, so typed earlier, the echo could come before the merged "err" (a loaded machine saw it).
        written = b"out\r\n" if apart else b"out\r\nerr\r\n"
        while written not in output:
            output += await running.stdout.receive_some()
        await running.stdin.send_all(b"typed\n\x04")
        while chunk := await running.stdout.receive_some():
            output += chunk
        code = await running.wait()
    await running.reap()
    return code, output, *reader


@pytest.mark.parametrize("apart", [True, False])
async def test_the_models_terminal_and_fifo_agree_with_real_ones(tmp_path: Path, apart: bool) -> None:
    state = _state()
    real = await _execution_on_a_terminal(ProcessContainers(state, tmp_path), apart=apart)
    model = await _execution_on_a_terminal(ModelContainers(state), apart=apart)
    if apart:
        assert real == (1, b"out\r\ntyped\r\ntyped\r\ntty0\r\n", 0, b"err\n"), "test -t 2: false"
    else:
        assert real == (0, b"out\r\nerr\r\ntyped\r\ntyped\r\ntty0\r\nmerged\r\n", 0, b"")
    assert model == real
    assert not await trio.to_thread.run_sync(lambda: list(tmp_path.glob("**/.supervisor-*"))), "none left"
