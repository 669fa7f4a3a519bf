"""Executions over the WebSocket protocol of websocket.schema.json; every message is validated."""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path

import pytest
import trio
import trio_websocket

from supervisor.core.config import ExecutionSettings, ServerSettings, Settings
from supervisor.desk.executions import MESSAGE_CONNECTION_LOST

from .conftest import MESSAGES, Harness, output


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


NO_TERMINAL = Settings(server=ServerSettings(port=0), execution=ExecutionSettings(tty=False))
MERGED = Settings(server=ServerSettings(port=0), execution=ExecutionSettings(interactive_stderr=False))


async def test_stdout_stderr_and_exit_codes(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    messages = await harness.execute(runner, command="echo -n Hello World; echo oops >&2; exit 7")
    assert messages[0] == {"type": "start"}
    assert output(messages) == "Hello World"
    assert output(messages, "stderr") == "oops\n"
    assert messages[-1] == {"type": "exit", "data": 7}
    assert [m["type"] for m in messages].count("exit") == 1
    assert (await harness.execute(runner, command="true"))[-1] == {"type": "exit", "data": 0}
    failed = await harness.execute(runner, command="cat -invalid")
    assert failed[-1]["data"] != 0
    assert output(failed, "stderr")


async def test_stdin_lines_reach_the_command_on_its_terminal(harness: Harness) -> None:
    """The terminal echoes what is typed, and writes each line's end as \\r\\n (as Poseidon's)."""
    await harness.environment(10)
    runner = await harness.runner(10)
    messages = await harness.execute(runner, stdin=["Hello from stdin\n", "ignored\n"], command="head -n 1")
    echoed_and_read = output(messages).replace("ignored\r\n", "")  # typed as head exits: echoed or not
    assert echoed_and_read == "Hello from stdin\r\n" * 2
    assert messages[-1] == {"type": "exit", "data": 0}


async def test_large_output_arrives_whole_and_in_order(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    messages = await harness.execute(runner, command="seq 1 200000; echo done >&2")
    assert output(messages) == "".join(f"{i}\r\n" for i in range(1, 200_001))
    assert output(messages, "stderr") == "done\n", "stderr apart, through no terminal"


@pytest.mark.parametrize("settings", [NO_TERMINAL])
async def test_without_a_terminal_large_stdin_and_output_arrive_whole(harness: Harness) -> None:
    """tty = false: separate streams as the command wrote them, and stdin without a terminal's line
    limit (4 KiB a line)."""
    await harness.environment(10)
    runner = await harness.runner(10)
    messages = await harness.execute(runner, command="seq 1 200000; echo done >&2; test -t 1 || echo no tty")
    assert output(messages) == "".join(f"{i}\n" for i in range(1, 200_001)) + "no tty\n"
    assert output(messages, "stderr") == "done\n"
    line = "é" * 100_000 + "\n"  # one 200 KB text frame, two bytes a character
    echoed = await harness.execute(runner, stdin=[line], command="head -n 1")
    assert output(echoed) == line


@pytest.mark.parametrize("settings", [MERGED])
async def test_on_a_terminal_without_interactive_stderr_stderr_is_merged(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    messages = await harness.execute(
        runner, command="echo out; sleep 0.1; echo err >&2; test -t 2 && echo tty"
    )
    assert output(messages) == "out\r\nerr\r\ntty\r\n"
    assert output(messages, "stderr") == ""


async def test_by_default_an_execution_runs_as_poseidons_do(harness: Harness) -> None:
    """Under /sbin/setuser user, in bash, on a terminal, with stderr apart; a privileged one runs as
    the task's user."""
    await harness.environment(10)
    runner = await harness.runner(10)
    command = (
        '[[ 1 == 1 ]] && echo "bash ${BASH_VERSION:+yes}"; echo "user $USER $LOGNAME"; '
        "test -t 0 && test -t 1 && echo terminal; test -t 2 || echo stderr apart; echo oops >&2"
    )
    messages = await harness.execute(runner, command=command)
    assert output(messages) == "bash yes\r\nuser user user\r\nterminal\r\nstderr apart\r\n"
    assert output(messages, "stderr") == "oops\n"
    assert messages[-1] == {"type": "exit", "data": 0}
    privileged = await harness.execute(runner, command='echo "user=$USER"; id -u', privilegedExecution=True)
    assert output(privileged) == f"user=\r\n{os.getuid()}\r\n", "the task's user, not the wrapper's"
    root = harness.cluster.execs.containers.root  # type: ignore[attr-defined]
    assert not list(root.glob("*/tmp/.supervisor-*")), "no fifo or note left"


async def test_environment_variables(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    messages = await harness.execute(
        runner, command="env", environment={"MY_VAR": "value with spaces", "OTHER_1": "x=y"}
    )
    variables = dict(line.split("=", 1) for line in output(messages).splitlines() if "=" in line)
    assert variables["CODEOCEAN"] == "true"
    assert variables["MY_VAR"] == "value with spaces"
    assert variables["OTHER_1"] == "x=y"
    assert not [name for name in variables if name.startswith("NOMAD_")], "Nomad's variables never leak"


async def test_time_limit_sends_timeout_and_stops_the_command(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    start = trio.current_time()
    command = "sleep 60 & echo $! > child.pid; echo started; sleep 30; echo never"
    messages = await harness.execute(runner, command=command, timeLimit=1)
    assert trio.current_time() - start < 10
    assert output(messages) == "started\r\n"
    assert messages[-1] == {"type": "timeout"}
    assert not harness.cluster.execs.count, "the command (and the reader of its stderr) was stopped"
    root = harness.cluster.execs.containers.root  # type: ignore[attr-defined]
    child = int(next(root.glob("*/*/child.pid")).read_text())
    await harness.wait_for(lambda: _gone(child), within=5)
    assert not list(root.glob("*/tmp/.supervisor-*")), "no fifo or note left"
    assert (await harness.execute(runner, command="echo still usable"))[-1] == {"type": "exit", "data": 0}


async def test_two_executions_at_once_on_one_runner(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    results: dict[str, list[dict[str, object]]] = {}

    async def run(name: str, command: str) -> None:
        results[name] = await harness.execute(runner, command=command)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "a", "sleep 0.3; echo a")
        nursery.start_soon(run, "b", "echo b")
    assert output(results["a"]) == "a\r\n"
    assert output(results["b"]) == "b\r\n"
    assert results["a"][-1] == results["b"][-1] == {"type": "exit", "data": 0}


async def test_a_client_closing_early_stops_the_command(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    response = await harness.http.post(f"/runners/{runner}/execute", json={"command": "echo go; sleep 60"})
    async with trio_websocket.open_websocket_url(response.json()["websocketUrl"]) as ws:
        assert json.loads(await ws.get_message()) == {"type": "start"}
        assert json.loads(await ws.get_message()) == {"type": "stdout", "data": "go\r\n"}
    await harness.wait_for(lambda: harness.service.executions.running_count == 0, within=10)
    await harness.wait_for(lambda: harness.cluster.execs.count == 0, within=10)


async def test_execution_urls_are_single_use_and_checked(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    response = await harness.http.post(f"/runners/{runner}/execute", json={"command": "true"})
    url = response.json()["websocketUrl"]
    assert url.startswith("ws://")
    assert f"/api/v1/runners/{runner}/websocket?executionID=" in url
    async with trio_websocket.open_websocket_url(url) as ws:
        with pytest.raises(trio_websocket.ConnectionClosed):
            while True:
                MESSAGES.validate(json.loads(await ws.get_message()))
    with pytest.raises(trio_websocket.ConnectionRejected) as reused:
        async with trio_websocket.open_websocket_url(url):
            pass  # pragma: no cover
    assert reused.value.status_code == 404
    unknown = url.split("executionID=")[0] + "executionID=nope"
    with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
        async with trio_websocket.open_websocket_url(unknown):
            pass  # pragma: no cover
    assert rejected.value.status_code == 404


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "command is required"),
        ({"command": "echo 'quoted'"}, "single quotation mark"),
        ({"command": "env", "environment": {"1BAD": "x"}}, "not a valid variable name"),
        ({"command": "env", "environment": {"A": 1}}, "environment.A must be a string, got 1"),
        ({"command": "true", "timeLimit": -5}, "timeLimit"),
        ({"command": "true", "privilegedExecution": "yes"}, "privilegedExecution"),
        ({"command": "true", "shell": "bash"}, "unknown field 'shell'"),
    ],
)
async def test_bad_execute_requests_are_400(harness: Harness, body: dict[str, object], message: str) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    response = await harness.http.post(f"/runners/{runner}/execute", json=body)
    assert response.status_code == 400
    assert message in response.json()["message"]


async def test_destroying_the_runner_ends_its_execution_with_an_error(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)

    async def destroy() -> None:
        assert (await harness.http.delete(f"/runners/{runner}")).status_code == 204

    messages = await harness.run_until_end(runner, "echo go; sleep 60", destroy)
    assert messages[-1] == {"type": "error", "data": "the runner was destroyed by request"}


async def test_a_leader_restart_leaves_an_execution_held_by_its_agent_alone(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    messages = await harness.run_until_end(
        runner, "echo go; sleep 1; echo done", partial(harness.restart_leader, 1)
    )
    assert messages[-1] == {"type": "exit", "data": 0}
    assert output(messages) == "go\r\ndone\r\n"
    assert harness.service.client.exec_paths["agent"] >= 1


async def test_a_lost_exec_connection_is_an_error_not_an_exit(harness: Harness) -> None:
    """Through the servers (the agents firewalled off), a leader restart cuts the session."""
    await harness.firewall_agents()
    await harness.environment(10)
    runner = await harness.runner(10)

    messages = await harness.run_until_end(runner, "echo go; sleep 60", partial(harness.restart_leader, 1))
    assert messages[-1] == {"type": "error", "data": MESSAGE_CONNECTION_LOST}, messages
    assert not any(m["type"] == "exit" for m in messages)
    # Nomad (and the simulator) leave the command running when its session breaks: the daemon stops it.
    await harness.wait_for(lambda: harness.cluster.execs.count == 0, within=10)
    await harness.wait_for(lambda: harness.service.pool.used_runner(runner) is not None)
