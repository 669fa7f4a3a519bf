"""The exec client against a WebSocket server on 127.0.0.1 that ends sessions the ways Nomad does."""

from __future__ import annotations

import base64
import json
import os
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trio
import trio.lowlevel
import trio.testing

from supervisor.base.errors import (
    ExecConnectionLost,
    ExecRejected,
    NomadUnavailableError,
    TerminalError,
    TransientError,
)
from supervisor.base.network import TcpNetwork
from supervisor.core.nodes import NodeTracker, TrackedNode
from supervisor.nomad import ExecExited, ExecOutput, NomadClient, NomadSettings
from supervisor.nomad.agents import AgentRoute

from .fakes import WsPeer, start_exec_server

ALLOC = "9a8b7c6d-5e4f-3a2b-1c0d-e9f8a7b6c5d4"


def client_for(base_url: str, **settings: Any) -> NomadClient:
    return NomadClient(NomadSettings(addresses=(base_url,), **settings))


async def test_session_streams_stdin_and_output_and_exit_zero_as_empty_result() -> None:
    peers: list[WsPeer] = []

    async def handler(peer: WsPeer) -> None:
        peers.append(peer)
        await peer.receive_json()  # tty size
        await peer.receive_json()  # heartbeat
        stdin = await peer.receive_json()
        await peer.receive_json()  # stdin close
        await peer.send_output("stdout", base64.b64decode(stdin["stdin"]["data"]).upper())
        await peer.send_output("stderr", b"warning\n")
        await peer.send_exit(0)

    async with trio.open_nursery() as nursery:
        url = await start_exec_server(nursery, handler)
        async with (
            client_for(url, token="s3cret", namespace="poseidon") as client,
            client.open_exec(ALLOC, task="runner", command=["/bin/sh", "-c", "tr a-z A-Z"]) as session,
        ):
            await session.resize(height=40, width=120)
            await session.send_heartbeat()
            await session.send_stdin(b"echo hi\n")
            await session.close_stdin()
            frames = [frame async for frame in session]
        nursery.cancel_scope.cancel("test over")

    assert frames == [
        ExecOutput("stdout", b"ECHO HI\n"),
        ExecOutput("stderr", b"warning\n"),
        ExecExited(exit_code=0),
    ], "the drop without a close frame after exited is the normal end"
    assert session.stdout_closed
    assert session.stderr_closed
    peer = peers[0]
    assert peer.received[0] == {"tty_size": {"height": 40, "width": 120}}
    assert peer.received[1] == {}
    assert peer.received[3] == {"stdin": {"close": True}}
    target = urlsplit(peer.target)
    assert target.path == f"/v1/client/allocation/{ALLOC}/exec"
    query = parse_qs(target.query)
    assert json.loads(query["command"][0]) == ["/bin/sh", "-c", "tr a-z A-Z"]
    assert query["task"] == ["runner"]
    assert query["tty"] == ["false"]
    assert query["namespace"] == ["poseidon"]


async def test_non_zero_exit_and_collected_output() -> None:
    async def handler(peer: WsPeer) -> None:
        await peer.send_output("stdout", b"partial")
        await peer.send_json({})  # unknown or empty frames are ignored
        await peer.send_output("stdout", b" line\n")
        await peer.send_exit(2)

    async with trio.open_nursery() as nursery:
        url = await start_exec_server(nursery, handler)
        async with (
            client_for(url) as client,
            client.open_exec(ALLOC, task="runner", command=["false"]) as session,
        ):
            exited, stdout, stderr = await session.wait_exit()
        nursery.cancel_scope.cancel("test over")

    assert exited.exit_code == 2
    assert stdout == b"partial line\n"
    assert stderr == b""


@pytest.mark.parametrize(
    ("code", "reason"),
    [(1011, 'task "runner" is not running.'), (1008, 'unknown task name "web"')],
)
async def test_close_frames_become_exec_rejected_with_the_reason(code: int, reason: str) -> None:
    async def handler(peer: WsPeer) -> None:
        await peer.close(code, reason)

    async with trio.open_nursery() as nursery:
        url = await start_exec_server(nursery, handler)
        async with client_for(url) as client:
            with pytest.raises(ExecRejected) as caught:
                async with client.open_exec(ALLOC, task="web", command=["true"]) as session:
                    await session.receive()
        nursery.cancel_scope.cancel("test over")

    assert isinstance(caught.value, TerminalError)
    assert caught.value.code == code
    assert caught.value.reason == reason


async def test_drop_before_exit_is_connection_lost_never_an_exit_code() -> None:
    async def handler(peer: WsPeer) -> None:
        await peer.send_output("stdout", b"working...\n")
        await peer.drop()  # the server proxying the session restarted

    async with trio.open_nursery() as nursery:
        url = await start_exec_server(nursery, handler)
        async with client_for(url) as client:
            received = []
            with pytest.raises(ExecConnectionLost, match="outcome is unknown") as caught:
                async with client.open_exec(ALLOC, task="runner", command=["sleep", "60"]) as session:
                    async for frame in session:
                        received.append(frame)
        nursery.cancel_scope.cancel("test over")

    assert received == [ExecOutput("stdout", b"working...\n")], "output sent before the drop arrives"
    assert isinstance(caught.value, TransientError)
    assert session.exited is None


async def never_called(peer: WsPeer) -> None:
    raise AssertionError("the upgrade was refused")  # pragma: no cover


async def test_upgrade_refused_with_http_status_is_translated() -> None:
    async with trio.open_nursery() as nursery:
        url = await start_exec_server(nursery, never_called, reject_status=500)
        async with client_for(url) as client:
            with pytest.raises(NomadUnavailableError, match="command is not present"):
                async with client.open_exec(ALLOC, task="runner", command=[]):
                    pass  # pragma: no cover - the upgrade is refused
        nursery.cancel_scope.cancel("test over")


async def test_a_server_address_with_a_path_keeps_it_in_the_exec_request() -> None:
    """A Nomad behind a reverse proxy at a path prefix."""
    targets: list[str] = []

    async def handler(peer: WsPeer) -> None:
        targets.append(urlsplit(peer.target).path)
        await peer.send_exit(0)

    async with trio.open_nursery() as nursery:
        url = await start_exec_server(nursery, handler)
        async with (
            client_for(f"{url}/nomad") as client,
            client.open_exec(ALLOC, task="t", command=["true"]) as session,
        ):
            await session.wait_exit()
        nursery.cancel_scope.cancel("test over")
    assert targets == [f"/nomad/v1/client/allocation/{ALLOC}/exec"]


async def test_nothing_listening_is_unavailable_and_the_next_server_is_tried() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    dead = f"http://127.0.0.1:{port}"
    async with client_for(dead) as client:
        with pytest.raises(NomadUnavailableError, match="could not connect"):
            async with client.open_exec(ALLOC, task="runner", command=["true"]):
                pass  # pragma: no cover - nothing to connect to

    async def handler(peer: WsPeer) -> None:
        await peer.send_exit(0)

    async with trio.open_nursery() as nursery:
        alive = await start_exec_server(nursery, handler)
        async with (
            NomadClient(NomadSettings(addresses=(dead, alive))) as client,
            client.open_exec(ALLOC, task="runner", command=["true"]) as session,
        ):
            exited, _, _ = await session.wait_exit()
        assert exited.exit_code == 0
        assert client.address == alive, "the server that answered is kept"
        nursery.cancel_scope.cancel("test over")


async def _refused_port() -> str:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    return f"127.0.0.1:{port}"


async def _start_silent_peer(nursery: trio.Nursery) -> str:
    """A peer at 127.0.0.1 that accepts connections and never says a word; its ``host:port``."""

    async def silent(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    listeners = await nursery.start(partial(trio.serve_tcp, silent, 0, host="127.0.0.1"))
    return f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"


class _Locator:
    """Every allocation runs on node-1, whose agent (registered at index ``generation``) listens on
    ``http_addr``: as a node tracker would say, and one does."""

    def __init__(self, http_addr: str, generation: int = 7) -> None:
        self.tracker = NodeTracker()
        self.registered(http_addr, generation)

    def registered(self, http_addr: str, generation: int) -> None:
        """Node-1's agent registered again, at ``generation``, on ``http_addr``."""
        node = TrackedNode("node-1", status="ready", http_addr=http_addr, restarted_at=generation)
        self.tracker.nodes["node-1"] = node

    def agent_route(self, alloc_id: str) -> AgentRoute | None:
        return self.tracker.agent_route("node-1")

    def agent_learned(self, route: AgentRoute, http_addr: str, tls: bool) -> AgentRoute:
        return self.tracker.agent_learned(route, http_addr, tls)

    def agent_unreachable(self, route: AgentRoute) -> None:
        self.tracker.agent_unreachable(route)


def _located(client: NomadClient, http_addr: str) -> NomadClient:
    return client.located(_Locator(http_addr))


async def test_a_session_the_agent_started_is_never_retried_on_a_server() -> None:
    served: list[str] = []

    async def agent(peer: WsPeer) -> None:
        served.append("agent")
        await peer.send_output("stdout", b"started\n")
        await peer.drop()

    async def server(peer: WsPeer) -> None:
        served.append("server")  # pragma: no cover

    async with trio.open_nursery() as nursery:
        agent_url = await start_exec_server(nursery, agent)
        server_url = await start_exec_server(nursery, server)
        async with client_for(server_url) as client:
            client = _located(client, agent_url.removeprefix("http://"))
            with pytest.raises(ExecConnectionLost):
                async with client.open_exec(ALLOC, task="t", command=["true"]) as session:
                    assert session.path == "agent"
                    await session.wait_exit()
        nursery.cancel_scope.cancel("test over")
    assert served == ["agent"]
    assert client.exec_paths["fallback"] == 0


async def test_an_agent_that_refuses_connections_is_passed_over_for_its_generation() -> None:
    async def server(peer: WsPeer) -> None:
        await peer.send_exit(0)

    async with trio.open_nursery() as nursery:
        server_url = await start_exec_server(nursery, server)
        async with client_for(server_url) as client:
            locator = _Locator(await _refused_port())
            client = client.located(locator)
            for _ in range(2):
                async with client.open_exec(ALLOC, task="t", command=["true"]) as session:
                    assert session.path == "server"
                    assert (await session.wait_exit())[0] == ExecExited(0)
            assert client.exec_paths["fallback"] == 1, "the agent was tried once"
            locator.registered("127.0.0.1:1", generation=8)
            async with client.open_exec(ALLOC, task="t", command=["true"]) as session:
                await session.wait_exit()
            assert client.exec_paths["fallback"] == 2, "a new generation is tried again"
        nursery.cancel_scope.cancel("test over")


async def test_direct_exec_always_never_falls_back() -> None:
    async with client_for("http://127.0.0.1:1", direct_exec="always") as client:
        client = _located(client, await _refused_port())
        with pytest.raises(NomadUnavailableError):
            async with client.open_exec(ALLOC, task="t", command=["true"]):
                pass  # pragma: no cover
    assert client.exec_paths["fallback"] == 0


async def test_a_peer_that_accepts_and_never_answers_is_an_unknown_outcome_at_the_connect_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The request may have arrived: the command may run. Never sent again, to this server or another."""

    async with trio.open_nursery() as nursery:
        url = f"http://{await _start_silent_peer(nursery)}"
        async with client_for(url, exec_connect_timeout=3) as client:
            started = trio.current_time()
            with pytest.raises(ExecConnectionLost, match="outcome is unknown"):
                async with client.open_exec(ALLOC, task="t", command=["true"]):
                    pass  # pragma: no cover
            assert trio.current_time() - started == pytest.approx(3, abs=0.1)
        nursery.cancel_scope.cancel("test over")


async def test_an_agent_whose_upgrade_never_comes_is_never_retried_on_a_server(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The agent accepted the connection and the request: it may be running the command, so the
    servers are not asked to run it again."""
    asked: list[str] = []

    async def server(peer: WsPeer) -> None:
        asked.append("server")  # pragma: no cover

    async with trio.open_nursery() as nursery:
        agent = await _start_silent_peer(nursery)
        server_url = await start_exec_server(nursery, server)
        async with client_for(server_url) as client:
            client = _located(client, agent)
            with pytest.raises(ExecConnectionLost):
                async with client.open_exec(ALLOC, task="t", command=["true"]):
                    pass  # pragma: no cover
        nursery.cancel_scope.cancel("test over")
    assert asked == []
    assert client.exec_paths["fallback"] == 0


async def test_an_exec_on_an_agent_is_its_only_connection_there() -> None:
    """The exec's own connect tells whether the agent is there: no probe connection before it."""
    accepted: list[trio.SocketStream] = []

    async def agent(peer: WsPeer) -> None:
        await peer.send_exit(0)

    async with trio.open_nursery() as nursery:
        agent_url = await start_exec_server(nursery, agent, connections=accepted)
        async with client_for("http://127.0.0.1:1") as client:
            client = _located(client, agent_url.removeprefix("http://"))
            for _ in range(3):
                async with client.open_exec(ALLOC, task="t", command=["true"]) as session:
                    assert (await session.wait_exit())[0] == ExecExited(0)
                    assert session.path == "agent"
        nursery.cancel_scope.cancel("test over")
    assert len(accepted) == 3


class _DroppingPort9(TcpNetwork):
    """A host whose port 9 drops packets: a connect there never completes."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        if port == 9:
            await trio.sleep_forever()
        return await super().connect(host, port)


async def test_an_agent_not_connected_within_its_timeout_is_passed_over_for_the_servers(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A connect that never completes (a host that drops packets) sent nothing: the servers run it."""

    async def server(peer: WsPeer) -> None:
        await peer.send_exit(0)

    async with trio.open_nursery() as nursery:
        server_url = await start_exec_server(nursery, server)
        settings = NomadSettings(addresses=(server_url,), agent_connect_timeout=1)
        async with NomadClient(settings, network=_DroppingPort9()) as client:
            client = _located(client, "127.0.0.1:9")
            started = trio.current_time()
            async with client.open_exec(ALLOC, task="t", command=["true"]) as session:
                assert session.path == "server"
                assert (await session.wait_exit())[0] == ExecExited(0)
            assert trio.current_time() - started == pytest.approx(1, abs=0.1)
            assert client.exec_paths["fallback"] == 1
            async with client.open_exec(ALLOC, task="t", command=["true"]) as session:
                assert session.path == "server", "the agent is passed over until it registers again"
                await session.wait_exit()
        nursery.cancel_scope.cancel("test over")


async def test_a_tls_peer_that_never_shakes_hands_is_unavailable_at_the_connect_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The TLS handshake comes before the request: a peer stuck in it ran nothing."""

    async with trio.open_nursery() as nursery:
        url = f"https://{await _start_silent_peer(nursery)}"
        async with client_for(url, exec_connect_timeout=3) as client:
            started = trio.current_time()
            with pytest.raises(NomadUnavailableError, match="no TLS handshake"):
                async with client.open_exec(ALLOC, task="t", command=["true"]):
                    pass  # pragma: no cover
            assert trio.current_time() - started == pytest.approx(3, abs=0.1)
        nursery.cancel_scope.cancel("test over")


async def test_an_agent_address_that_is_not_one_sends_exec_to_the_servers() -> None:
    async def server(peer: WsPeer) -> None:
        await peer.send_exit(0)

    async with trio.open_nursery() as nursery:
        server_url = await start_exec_server(nursery, server)
        async with client_for(server_url) as client:
            client = _located(client, "127.0.0.1:not-a-port")
            async with client.open_exec(ALLOC, task="t", command=["true"]) as session:
                assert session.path == "server"
                assert (await session.wait_exit())[0] == ExecExited(0)
        nursery.cancel_scope.cancel("test over")


async def test_an_agent_that_answers_with_an_error_status_sends_exec_to_the_servers() -> None:
    async def server(peer: WsPeer) -> None:
        await peer.send_exit(0)

    async def unused(peer: WsPeer) -> None:
        pass  # pragma: no cover

    async with trio.open_nursery() as nursery:
        agent_url = await start_exec_server(nursery, unused, reject_status=404)
        server_url = await start_exec_server(nursery, server)
        async with client_for(server_url) as client:
            client = _located(client, agent_url.removeprefix("http://"))
            async with client.open_exec(ALLOC, task="t", command=["true"]) as session:
                assert session.path == "server", "a stale address must not declare the runner lost"
                assert (await session.wait_exit())[0] == ExecExited(0)
        nursery.cancel_scope.cancel("test over")


def _open_sockets() -> int:
    return sum(1 for fd in os.listdir("/proc/self/fd") if _is_socket(fd))


def _is_socket(fd: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    except OSError:
        return False


async def test_a_session_nomad_ends_without_a_close_frame_leaves_no_socket_open() -> None:
    """Nomad drops the TCP connection after ``exited``; trio-websocket then leaves its socket to be
    closed when the connection object is collected. Whatever still holds it (here a list; in the
    daemon an exception's traceback in a reference cycle, collected rarely), the socket must close
    when the session ends."""

    async def handler(peer: WsPeer) -> None:
        await peer.send_exit(0)

    held: list[object] = []
    async with trio.open_nursery() as nursery:
        url = await start_exec_server(nursery, handler)
        async with client_for(url) as client:
            before = _open_sockets()
            for _ in range(10):
                async with client.open_exec(ALLOC, task="runner", command=["true"]) as session:
                    await session.wait_exit()
                    await trio.testing.wait_all_tasks_blocked()  # the drop is seen: a 1006
                    held.append(session)
            await trio.testing.wait_all_tasks_blocked()
            assert _open_sockets() - before <= 1
        nursery.cancel_scope.cancel("test over")


async def test_a_close_handshake_the_peer_never_answers_does_not_turn_a_finished_session_into_an_error(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The command exited and its code was read; the peer, loaded, never answers the close frame.
    Past close_timeout the transport is closed, and the session's outcome stands."""

    async def exits_then_hangs(peer: WsPeer) -> None:
        await peer.send_json({"exited": True, "result": {}})
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        url = await start_exec_server(nursery, exits_then_hangs)
        async with client_for(url, close_timeout=1) as client:
            async with client.open_exec(ALLOC, task="t", command=["true"]) as session:
                exited, _, _ = await session.wait_exit()
                assert exited.exit_code == 0
                ended = trio.current_time()
            assert trio.current_time() - ended == pytest.approx(1, abs=0.1)
        nursery.cancel_scope.cancel("test over")


async def test_what_the_sessions_body_raises_comes_out_as_it_was_raised() -> None:
    async def handler(peer: WsPeer) -> None:
        await peer.send_exit(0)

    async with trio.open_nursery() as nursery:
        url = await start_exec_server(nursery, handler)
        async with client_for(url) as client:
            mine = ExceptionGroup("mine", [ValueError("one"), KeyError("two")])
            with pytest.raises(ExceptionGroup) as raised:
                async with client.open_exec(ALLOC, task="t", command=["true"]):
                    raise mine
            # Not flattened, nor wrapped in the session's own nursery group (trio's cancellation
            # of that nursery splits it, which rebuilds it).
            assert raised.value.message == "mine"
            assert [type(e) for e in raised.value.exceptions] == [ValueError, KeyError]
            with pytest.raises(ValueError, match="alone"):
                async with client.open_exec(ALLOC, task="t", command=["true"]):
                    raise ValueError("alone")
        nursery.cancel_scope.cancel("test over")
