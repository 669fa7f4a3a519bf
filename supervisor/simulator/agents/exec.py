"""Exec sessions of the simulated cluster: each runs the command in its task's container (see
``containers.py``: a local process by default, a model in the deterministic simulation).

The command is killed when its allocation stops. Frames follow Nomad's (nomad-api.md §5): base64
output chunks of at most 4 KiB, stream closes, ``exited`` with ``"result": {}`` for exit 0, then the
TCP connection is dropped without a close frame. A session cut by a server restart or an agent going
away gets no ``exited``. With ``tty=true`` the command runs on a terminal: its output, stderr
included, comes as ``stdout`` frames (then both streams' closes, as Docker's driver sends them), up
to its exit (what the terminal still holds then is read for a moment, then the terminal is hung up);
``tty_size`` frames set the terminal's size.

As with Nomad's shared executor, a session that ends before its command (the client went away, the
server or agent proxying it restarted) does not kill the command: its stdin is never closed and its
output is no longer read, so it blocks on its next write once the pipe is full. Only its
allocation stopping kills it; the client has to stop it itself.

A node whose container runtime is loaded starts exec'd commands late: ``start_delays`` holds, per
node ID, how many seconds each command waits before it starts.
"""

from __future__ import annotations

import base64
from typing import Any, Final

import orjson
import trio
from attrs import define, field
from loguru import logger

from ..http.server import ServerWebSocket
from ..state.objects import SimAlloc
from .containers import Containers, RunningCommand

__all__ = ["ExecSessions"]

_CHUNK: Final = 4096
# How long the terminal's output is still read once its command exited.
_TTY_DRAIN: Final = 1.0


@define(eq=False)
class _Session:
    alloc_id: str
    node_id: str
    server: str
    scope: trio.CancelScope = field(factory=trio.CancelScope)
    process: RunningCommand | None = None
    killed: bool = False

    def kill(self) -> None:
        self.killed = True
        if self.process is not None:
            self.process.kill()


async def _reap(process: RunningCommand | None) -> None:
    """Close the pipes of a killed process and wait for it, so nothing is left to the GC."""
    if process is not None:
        await process.reap()


class ExecSessions:
    """Every open exec session; the agents' ExecHooks."""

    def __init__(self, containers: Containers) -> None:
        self.containers = containers
        # Every session, in the order they started (a dict: iteration in a fixed order).
        self._sessions: dict[_Session, None] = {}
        # Where the commands of ended sessions are waited for; the cluster's own nursery.
        self.nursery: trio.Nursery | None = None
        # Node ID -> how long a command exec'd there waits before it starts (a loaded host).
        self.start_delays: dict[str, float] = {}

    @property
    def count(self) -> int:
        """Commands started by exec that still run, with or without their session."""
        return len(self._sessions)

    # -- ExecHooks ------------------------------------------------------------------------------

    def kill_alloc(self, alloc_id: str) -> None:
        """Kill the allocation's processes and end its sessions."""
        for session in list(self._sessions):
            if session.alloc_id == alloc_id:
                session.kill()

    def reset_workspace(self, alloc: SimAlloc) -> None:
        """Wipe the allocation's workspace (its task restarted in a fresh container)."""
        self.containers.reset(alloc)

    def drop_node(self, node_id: str) -> None:
        """End every session the node's agent holds, without an exit (its agent stopped)."""
        self._drop(lambda s: s.node_id == node_id)

    def drop_server(self, server: str) -> None:
        """End every session forwarded through the server, without an exit (it restarted)."""
        self._drop(lambda s: s.server == server)

    def drop_forwarded(self) -> None:
        """End every session a server forwards, without an exit (the leader restarted); the sessions
        the agents hold themselves go on."""
        self._drop(lambda s: bool(s.server))

    def _drop(self, selected: Any) -> None:
        for session in list(self._sessions):
            if selected(session):
                session.scope.cancel("exec session dropped")

    def remove_all_workspaces(self) -> None:
        """Remove every workspace (the cluster stopped)."""
        self.containers.remove_all()

    async def kill_all(self) -> None:
        """The cluster stops: every command goes, and is waited for."""
        sessions = list(self._sessions)
        self._sessions.clear()
        with trio.move_on_after(2, shield=True):
            for session in sessions:
                session.kill()
                await _reap(session.process)

    # -- one session ----------------------------------------------------------------------------

    async def run(
        self,
        websocket: ServerWebSocket,
        alloc: SimAlloc,
        task: str,
        command: list[str],
        server: str,
        *,
        tty: bool = False,
    ) -> None:
        """Run ``command`` in the allocation's task for one exec WebSocket, with Nomad's frames;
        ``server`` names the server that forwards the session, "" for one held by the agent."""
        session = _Session(alloc.id, alloc.node_id, server)
        self._sessions[session] = None
        try:
            with session.scope:
                await self._run(websocket, session, alloc, task, command, tty)
        finally:
            running = session.process is not None and session.process.returncode is None
            if running and not session.killed and self.nursery is not None:
                self.nursery.start_soon(self._outlive, session)
            else:
                self._sessions.pop(session, None)
                session.kill()
                with trio.move_on_after(2, shield=True):
                    await _reap(session.process)
            with trio.move_on_after(2, shield=True):
                await websocket.abort()

    async def _outlive(self, session: _Session) -> None:
        """A command whose session ended first runs on, unread, until it exits or is killed."""
        assert session.process is not None
        try:
            await session.process.wait()
        finally:
            self._sessions.pop(session, None)
            session.kill()  # the cluster is stopping, if the command still runs
            with trio.move_on_after(2, shield=True):
                await _reap(session.process)

    async def _run(
        self,
        websocket: ServerWebSocket,
        session: _Session,
        alloc: SimAlloc,
        task: str,
        command: list[str],
        tty: bool,
    ) -> None:
        if delay := self.start_delays.get(session.node_id):
            await trio.sleep(delay)
        try:
            assert self.nursery is not None, "the cluster is not running"
            process = await self.containers.start(alloc, task, command, nursery=self.nursery, tty=tty)
        except OSError as exc:
            await websocket.close(1011, f"failed to exec into task: {exc.strerror or exc}")
            return
        session.process = process
        client_gone = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._forward_stdin, websocket, session)
                if tty:
                    code = await self._terminal_output(websocket, process)
                else:
                    async with trio.open_nursery() as outputs:
                        outputs.start_soon(self._pump, websocket, process.stdout, "stdout")
                        outputs.start_soon(self._pump, websocket, process.stderr, "stderr")
                    code = await process.wait()
                nursery.cancel_scope.cancel("the command exited")
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            client_gone = True  # run() kills the command
        if client_gone:
            return
        exit_code = 128 - code if code < 0 else code
        result = {"exit_code": exit_code} if exit_code else {}
        await websocket.send_text(orjson.dumps({"exited": True, "result": result}).decode())

    async def _terminal_output(self, websocket: ServerWebSocket, process: RunningCommand) -> int:
        """Send the terminal's output as ``stdout`` until its command exited and the terminal is
        read (for at most _TTY_DRAIN more); the exit status."""
        async with trio.open_nursery() as outputs:
            read = trio.Event()

            async def pump() -> None:
                await self._pump(websocket, process.stdout, "stdout", close=False)
                read.set()

            outputs.start_soon(pump)
            code = await process.wait()
            with trio.move_on_after(_TTY_DRAIN):
                await read.wait()
            outputs.cancel_scope.cancel("the terminal's command exited")
        for name in ("stdout", "stderr"):
            await websocket.send_text(orjson.dumps({name: {"close": True}}).decode())
        return code

    @staticmethod
    async def _pump(
        websocket: ServerWebSocket, pipe: trio.abc.ReceiveStream | None, name: str, *, close: bool = True
    ) -> None:
        assert pipe is not None
        while data := await pipe.receive_some(_CHUNK):
            frame = {name: {"data": base64.b64encode(data).decode("ascii")}}
            await websocket.send_text(orjson.dumps(frame).decode())
        if close:
            await websocket.send_text(orjson.dumps({name: {"close": True}}).decode())

    @staticmethod
    async def _forward_stdin(websocket: ServerWebSocket, session: _Session) -> None:
        assert session.process is not None
        stdin = session.process.stdin
        assert stdin is not None
        while (text := await websocket.receive_text()) is not None:
            try:
                frame = orjson.loads(text)
            except orjson.JSONDecodeError:
                logger.debug("exec: ignored a frame that is not JSON")
                continue
            if not isinstance(frame, dict):
                continue
            size = frame.get("tty_size")
            if isinstance(size, dict):
                height, width = size.get("height", 0), size.get("width", 0)
                if type(height) is int and type(width) is int:
                    session.process.resize(height=height, width=width)
            body = frame.get("stdin")
            if not isinstance(body, dict):
                continue  # heartbeats and unknown frames
            try:
                if data := body.get("data"):
                    await stdin.send_all(base64.b64decode(data))
                if body.get("close") and session.process.stderr is not None:
                    await stdin.aclose()  # a terminal's input is not closed: Docker leaves it open
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        # The client went away: the session ends; the command runs on (the client has to stop it).
        session.scope.cancel("the client closed the exec session")
