"""A client that leaves while the daemon's write of its stdin waits on a command that reads none, or
that holds its execution up: it reads none of its output, or floods stdin at a command that reads none.

The known failure: one client's stdin message over ``server.max_message`` left its command running
for 10 minutes (its time limit), holding its runner. The promise: an execution whose client
misbehaves gets its command stopped, and no client holds a runner past its inactivity timeout.

A command that does not read its stdin (``sleep``) leaves its stdin pipe full: Nomad stops reading
the exec socket, the socket's buffers fill, and the daemon's write of the client's next stdin message
to Nomad (``ExecSession.send_stdin``) waits. The execution reads its client's messages only between
two such writes, and learns only from that read that its client has gone. Its client then sends a
message over ``server.max_message`` (the API server closes the WebSocket with 1009), or closes the
WebSocket itself: either way the execution must end, its command stopped, though it is not reading
its client's messages at that moment. So must it when the client sends another message first (the
API server reads on while the execution cannot take it), and when the client sends so much more that
the API server stops reading it: then the write that makes no progress for the runner's inactivity
timeout ends the execution. A client that reads none of its output (``yes`` with no time limit) holds
the daemon's send to it the same way: the send that makes no progress for the runner's inactivity
timeout ends the execution too.

Real clock and real TCP, as the tests under ``tests/daemon`` (whose harness this file builds the same
way): the simulated cluster's exec runs real processes, over real sockets whose buffers fill. Without
a terminal (``execution.tty = false``): what these tests are about is a stdin pipe that fills; a
terminal never blocks a write of its input, it drops what its line buffer cannot hold.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio
import trio_websocket

from supervisor.api.app import _ClientSocket
from supervisor.core.config import ExecutionSettings, ServerSettings, Settings
from supervisor.nomad import NomadClient, NomadSettings
from supervisor.nomad.exec import ExecSession
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

from .daemon.conftest import Harness

# Long enough for the stop of a command whose exec socket is full (nomad.close_timeout, 2 s, to give
# up on that socket's close, then the stop's own exec).
INACTIVITY_TIMEOUT = 4
MAX_MESSAGE = 256 * 1024
# The report's command ran for its whole time limit: 10 minutes.
TIME_LIMIT = 600
# Stdin messages written to a command that never reads them, at most, before the daemon's write to
# Nomad blocks (the pipe, then the exec socket's buffers on both sides, are full).
_MOST_MESSAGES = 1000
# A write of stdin to Nomad that has not ended after this long waits on a full socket.
_BLOCKED_AFTER = 1.0


@pytest.fixture
async def harness(nursery: trio.Nursery) -> AsyncIterator[Harness]:
    """The daemon on 127.0.0.1 port 0 against a simulated cluster, as ``tests/daemon``'s harness."""
    sim_config = SimConfig(seed=11, nodes=2, alloc_start_delay=0.01, task_kill_delay=0.01, eval_delay=0.001)
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    settings = Settings(
        server=ServerSettings(port=0, max_message=MAX_MESSAGE), execution=ExecutionSettings(tty=False)
    )
    daemon = Daemon(settings, environ={"NOMAD_ADDR": ",".join(cluster.addresses)})
    await nursery.start(daemon.run)
    async with (
        httpx.AsyncClient(base_url=daemon.addresses[0] + "/api/v1", timeout=30) as http,
        NomadClient(NomadSettings(addresses=tuple(cluster.addresses))) as nomad,
    ):
        yield Harness(cluster, daemon, http, nomad)
    daemon.stop()


class _Writes:
    """The daemon's writes through ``owner.name`` (its writes of stdin to Nomad, or its sends to the
    client), counted as they begin and end, and their bytes written (behaviour unchanged)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
        self.begun = self.ended = self.written = 0
        # When the last write began.
        self.begun_at = -math.inf
        original = getattr(owner, name)

        async def counted(self_: object, data: Any) -> None:
            self.begun += 1
            self.begun_at = trio.current_time()
            await original(self_, data)
            self.ended += 1
            self.written += len(data) if isinstance(data, bytes) else 0

        monkeypatch.setattr(owner, name, counted)

    def have_written(self, size: int) -> Callable[[], bool]:
        return lambda: self.written == size

    def have_ended_more_than(self, count: int) -> Callable[[], bool]:
        return lambda: self.ended > count


async def _fill_stdin(ws: trio_websocket.WebSocketConnection, harness: Harness, writes: _Writes) -> None:
    """Send stdin messages, each within the limit, until the daemon's write of one to Nomad (in one
    write or several) blocks: the execution has taken that message and waits, not reading the next."""
    chunk = "x" * MAX_MESSAGE
    for sent in range(1, _MOST_MESSAGES + 1):
        await ws.send_message(chunk)
        with trio.move_on_after(_BLOCKED_AFTER) as waiting:
            await harness.wait_for(writes.have_written(sent * MAX_MESSAGE))
        if waiting.cancelled_caught:
            return
    raise AssertionError(f"{_MOST_MESSAGES} stdin messages went through to a command that reads none")


async def _eventually(harness: Harness, condition: Callable[[], bool], *, by: float) -> bool:
    """Whether ``condition()`` holds by the time ``by`` (trio's clock)."""
    with trio.move_on_at(by):
        await harness.wait_for(condition, within=math.inf)
    return condition()


async def _prepare(harness: Harness, command: str, time_limit: int) -> tuple[str, str]:
    """Claim a runner with the inactivity timeout and prepare ``command`` in it; returns the runner
    and the execution's WebSocket URL."""
    await harness.environment(10)
    runner = await harness.runner(10, inactivity_timeout=INACTIVITY_TIMEOUT)
    body: dict[str, Any] = {"command": command, "timeLimit": time_limit}
    prepared = await harness.http.post(f"/runners/{runner}/execute", json=body)
    assert prepared.status_code == 200, prepared.text
    return runner, str(prepared.json()["websocketUrl"])


_Leave = Callable[[trio_websocket.WebSocketConnection], Awaitable[int]]


async def _leave_while_stdin_waits(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, leave: _Leave
) -> tuple[str, float, int]:
    """Claim a runner, run a command that reads no stdin, fill its stdin, then ``leave``; returns
    the runner, the time the client left, and the WebSocket's close code."""
    writes = _Writes(monkeypatch, ExecSession, "send_stdin")
    runner, url = await _prepare(harness, "sleep 600", TIME_LIMIT)
    with trio.CancelScope() as client:
        async with trio_websocket.open_websocket_url(url) as ws:
            assert await ws.get_message() == '{"type":"start"}'
            await _fill_stdin(ws, harness, writes)
            code = await leave(ws)
            left = trio.current_time()
            # The close handshake is done; trio-websocket waits for the server to close the TCP
            # connection, which it does once the execution has ended: not longer than this.
            client.deadline = left + INACTIVITY_TIMEOUT
    assert writes.ended < writes.begun, "the daemon's last write of stdin still waits"
    return runner, left, code


async def _assert_stopped_and_released(harness: Harness, runner: str, by: float, how: str) -> None:
    """The execution has ended by the time ``by``, its command stopped, and its runner's inactivity
    timeout, counted from there, releases the runner."""
    executions, execs = harness.service.executions, harness.cluster.execs
    stopped = await _eventually(harness, lambda: executions.running_count == 0 and execs.count == 0, by=by)
    assert stopped, (
        f"its client {how}, yet the execution still runs ({executions.running_count} running), its "
        f"command too ({execs.count} in the cluster): until its time limit, holding runner {runner}"
    )
    # Nothing works in the runner any more: its inactivity timeout, counted from the execution's end,
    # releases it.
    released = await _eventually(
        harness, lambda: harness.service.pool.used_runner(runner) is None, by=by + INACTIVITY_TIMEOUT + 1
    )
    assert released, f"runner {runner} is still held past its inactivity timeout"


async def test_an_oversized_stdin_message_stops_the_command_and_frees_the_runner(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def send_too_much(ws: trio_websocket.WebSocketConnection) -> int:
        await ws.send_message("y" * (MAX_MESSAGE + 1))
        with trio.fail_after(10), pytest.raises(trio_websocket.ConnectionClosed) as closed:
            while True:
                await ws.get_message()
        assert closed.value.reason is not None
        return closed.value.reason.code

    runner, left, code = await _leave_while_stdin_waits(harness, monkeypatch, send_too_much)
    assert code == 1009
    how = "sent a stdin message over server.max_message"
    await _assert_stopped_and_released(harness, runner, left + INACTIVITY_TIMEOUT, how)


async def test_a_client_that_closes_while_its_stdin_waits_gets_its_command_stopped(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def close(ws: trio_websocket.WebSocketConnection) -> int:
        with trio.fail_after(10):
            await ws.aclose(1000)
        assert ws.closed is not None
        return ws.closed.code

    runner, left, code = await _leave_while_stdin_waits(harness, monkeypatch, close)
    assert code == 1000
    await _assert_stopped_and_released(harness, runner, left + INACTIVITY_TIMEOUT, "closed its WebSocket")


async def test_a_client_that_sends_more_stdin_then_closes_gets_its_command_stopped(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message after the one whose write waits cannot be handed to the execution: the API server
    reads on all the same, and sees the close behind it."""

    async def send_more_then_close(ws: trio_websocket.WebSocketConnection) -> int:
        await ws.send_message("one more line\n")
        with trio.fail_after(10):
            await ws.aclose(1000)
        assert ws.closed is not None
        return ws.closed.code

    runner, left, code = await _leave_while_stdin_waits(harness, monkeypatch, send_more_then_close)
    assert code == 1000
    how = "sent one more stdin message, then closed its WebSocket"
    await _assert_stopped_and_released(harness, runner, left + INACTIVITY_TIMEOUT, how)


async def test_a_client_that_floods_stdin_then_goes_is_ended_by_the_inactivity_timeout(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More stdin than server.max_message behind the write that waits: the API server stops reading
    the client (it would hold it all in memory otherwise), so its going is not seen. The write of
    stdin that makes no progress for the runner's inactivity timeout ends the execution."""
    writes = _Writes(monkeypatch, ExecSession, "send_stdin")
    runner, url = await _prepare(harness, "sleep 600", TIME_LIMIT)
    with trio.CancelScope() as client:
        async with trio_websocket.open_websocket_url(url) as ws:
            assert await ws.get_message() == '{"type":"start"}'
            await _fill_stdin(ws, harness, writes)
            stalled_since = writes.begun_at
            chunk = "z" * MAX_MESSAGE
            for _ in range(_MOST_MESSAGES):
                with trio.move_on_after(_BLOCKED_AFTER) as flooding:
                    await ws.send_message(chunk)
                if flooding.cancelled_caught:
                    break  # every buffer on the way is full: the API server reads no more
            else:
                raise AssertionError(f"the API server read {_MOST_MESSAGES} messages it cannot hand over")
            client.cancel("the client goes, without a close")
    assert writes.ended < writes.begun, "the daemon's last write of stdin still waits"
    # The inactivity timeout for the write, then as long again for the stop (as above).
    by = stalled_since + 2 * INACTIVITY_TIMEOUT
    await _assert_stopped_and_released(harness, runner, by, "flooded stdin, then went")


async def test_a_client_that_reads_none_of_its_output_is_ended_by_the_inactivity_timeout(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``yes`` with no time limit, and a client that reads nothing after ``start``: the daemon's send
    of output to it waits once every buffer on the way is full. The send that makes no progress for
    the runner's inactivity timeout ends the execution; its frame was cut short, so the socket
    closes without a close frame (1006)."""
    sends = _Writes(monkeypatch, _ClientSocket, "send_json")
    runner, url = await _prepare(harness, "yes", 0)
    with trio.fail_after(6 * INACTIVITY_TIMEOUT):
        # One message waits in trio-websocket's queue; then it reads the socket no more.
        async with trio_websocket.open_websocket_url(url, message_queue_size=1) as ws:
            assert await ws.get_message() == '{"type":"start"}'
            while True:
                with trio.move_on_after(_BLOCKED_AFTER) as waiting:
                    await harness.wait_for(sends.have_ended_more_than(sends.ended))
                if waiting.cancelled_caught:
                    break  # no send ended for a while: the one under way waits
            assert sends.begun == sends.ended + 1, "the daemon's send of output still waits"
            stalled_since = sends.begun_at
            by = stalled_since + 2 * INACTIVITY_TIMEOUT
            await _assert_stopped_and_released(harness, runner, by, "read none of its output")
            # What waited in the buffers, then the end.
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                while True:
                    await ws.get_message()
    assert closed.value.reason is not None
    assert closed.value.reason.code == 1006
