"""Running a command in an allocation through Nomad's exec WebSocket
(``/v1/client/allocation/:id/exec``).

Frames, as Nomad writes them: ``{"stdout"|"stderr": {"data": base64}}`` chunks, ``{"...": {"close":
true}}`` when a stream ends, then ``{"exited": true, "result": {"exit_code": N}}`` where exit code 0
is encoded as ``"result": {}``. After ``exited`` Nomad drops the TCP connection without a close frame;
that is the normal end. Failures:

- a close frame (1008 for a 4xx cause, 1011 otherwise) carries Nomad's reason: ExecRejected, or
  ExecAllocationUnknown when Nomad no longer knows the allocation (a 404 before the upgrade too),
  or ExecAgentUnreachable when the server cannot reach the client agent (nothing ran);
- no connection, or an HTTP error instead of the upgrade (Nomad <= 2.0.2 checks the command first):
  NomadUnavailableError or the status's error; nothing ran;
- a drop before ``exited`` (a server proxying the session restarted): ExecConnectionLost, since the
  command's outcome cannot be known. Never an exit code.
"""

from __future__ import annotations

import base64
import math
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, Literal
from urllib.parse import urlencode, urlsplit

import orjson
import trio
import trio_websocket
from attrs import frozen
from loguru import logger

from ..base.errors import (
    ExecAgentUnreachable,
    ExecAllocationUnknown,
    ExecConnectionLost,
    ExecRejected,
    NomadAddressUnreachable,
    NomadUnavailableError,
    raise_alone,
)
from .boundary import translate_status
from .connection import NomadConnection

__all__ = ["ExecExited", "ExecOutput", "ExecSession", "open_exec"]

_REJECTION_CODES: Final = frozenset({1008, 1011})
_MESSAGE_QUEUE_SIZE: Final = 16
_MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024


@frozen
class ExecOutput:
    """A chunk of the command's output, as Nomad sent it (at most 4 KiB)."""

    stream: Literal["stdout", "stderr"]
    data: bytes


@frozen
class ExecExited:
    """The command ended; ``exit_code`` 0 is Nomad's ``"result": {}``."""

    exit_code: int
    signal: int = 0
    oom_killed: bool = False


class ExecSession:
    """One exec session; iterate it for ExecOutput chunks, ending with one ExecExited."""

    def __init__(self, connection: trio_websocket.WebSocketConnection, what: str) -> None:
        self._connection = connection
        self._what = what
        self.exited: ExecExited | None = None
        self.stdout_closed = False
        self.stderr_closed = False
        self.malformed_frames = 0
        # Who holds the session: the allocation's client "agent", or a "server" that forwards it.
        self.path = "server"

    async def send_stdin(self, data: bytes) -> None:
        """Write ``data`` to the command's stdin."""
        await self._send({"stdin": {"data": base64.b64encode(data).decode("ascii")}})

    async def close_stdin(self) -> None:
        """Close the command's stdin."""
        await self._send({"stdin": {"close": True}})

    async def resize(self, *, height: int, width: int) -> None:
        """Tell a tty session its new size."""
        await self._send({"tty_size": {"height": height, "width": width}})

    async def send_heartbeat(self) -> None:
        """Keep a quiet session open (Nomad's client sends one every 10 s)."""
        await self._send({})

    async def _send(self, frame: dict[str, Any]) -> None:
        try:
            await self._connection.send_message(orjson.dumps(frame).decode())
        except trio_websocket.ConnectionClosed as exc:
            raise self._closed_error(exc) from exc

    def __aiter__(self) -> ExecSession:
        return self

    async def __anext__(self) -> ExecOutput | ExecExited:
        if self.exited is not None:
            raise StopAsyncIteration
        return await self.receive()

    async def receive(self) -> ExecOutput | ExecExited:
        """The next output chunk or the exit; unknown and empty frames are skipped."""
        while True:
            try:
                message = await self._connection.get_message()
            except trio_websocket.ConnectionClosed as exc:
                if self.exited is not None:
                    return self.exited
                raise self._closed_error(exc) from exc
            frame = self._parse(message)
            if frame is not None:
                return frame

    async def wait_exit(self, *, max_output_bytes: int = 1 << 20) -> tuple[ExecExited, bytes, bytes]:
        """Run to the end, collecting output (each stream up to ``max_output_bytes``)."""
        out = {"stdout": bytearray(), "stderr": bytearray()}
        async for frame in self:
            if isinstance(frame, ExecExited):
                return frame, bytes(out["stdout"]), bytes(out["stderr"])
            buffer = out[frame.stream]
            buffer += frame.data[: max(0, max_output_bytes - len(buffer))]
        raise AssertionError("an exec session ends with ExecExited or an error")  # pragma: no cover

    def _parse(self, message: str | bytes) -> ExecOutput | ExecExited | None:
        """One frame of Nomad's exec protocol; a frame that is not one is logged, counted and skipped."""
        try:
            return self._frame(orjson.loads(message))
        except (ValueError, TypeError) as exc:  # orjson's JSONDecodeError and binascii.Error too
            self.malformed_frames += 1
            logger.warning("skipped a malformed exec frame of {}: {} ({!r})", self._what, exc, message[:200])
            return None

    def _frame(self, frame: Any) -> ExecOutput | ExecExited | None:
        if not isinstance(frame, dict):
            raise ValueError(f"a frame must be a JSON object, got {type(frame).__name__}")
        if frame.get("exited"):
            result = frame.get("result") or {}  # exit code 0 comes as "result": {}
            if not isinstance(result, dict):
                raise ValueError("result must be an object")
            self.exited = ExecExited(
                exit_code=_integer(result, "exit_code"),
                signal=_integer(result, "signal"),
                oom_killed=result.get("oom_killed") is True,
            )
            return self.exited
        for stream in ("stdout", "stderr"):
            body = frame.get(stream)
            if not isinstance(body, dict):
                continue
            if body.get("close") is True:
                setattr(self, f"{stream}_closed", True)
            if data := body.get("data"):
                if not isinstance(data, str):
                    raise ValueError(f"{stream}.data must be a base64 string")
                return ExecOutput(stream, base64.b64decode(data, validate=True))
        return None

    def _closed_error(self, exc: trio_websocket.ConnectionClosed) -> Exception:
        close = exc.reason or trio_websocket.CloseReason(1006, None)
        if close.code in _REJECTION_CODES:
            return rejection(close.code, close.reason or "")
        return ExecConnectionLost(
            f"exec connection lost before the command exited (close {close.code} {close.name}): "
            f"{self._what}; the outcome is unknown"
        )


def _integer(result: dict[str, Any], key: str) -> int:
    value = result.get(key, 0)  # Nomad omits zero fields
    if type(value) is not int:
        raise ValueError(f"result.{key} must be an integer")
    return value


def rejection(code: int, reason: str) -> ExecRejected:
    """The most specific error for Nomad's close frame: an allocation Nomad no longer knows, an
    agent the server cannot reach, or another refusal."""
    lowered = reason.lower()
    if code == 1008 and ("unknown allocation" in lowered or "alloc not found" in lowered):
        return ExecAllocationUnknown(code, reason)
    if "no path to node" in lowered or "failed to connect to client" in lowered:
        return ExecAgentUnreachable(code, reason)
    return ExecRejected(code, reason)


def exec_url(
    client: NomadConnection, alloc_id: str, *, task: str, command: Sequence[str], tty: bool, address: str = ""
) -> str:
    """The exec WebSocket's URL on ``address`` (a server's or an agent's), or the client's server."""
    base = (address or client.address).replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return base + _exec_resource(client, alloc_id, task=task, command=command, tty=tty)


def _exec_resource(
    client: NomadConnection, alloc_id: str, *, task: str, command: Sequence[str], tty: bool
) -> str:
    """The exec WebSocket's path and query."""
    query = {
        **client.common_params(),
        "task": task,
        "command": orjson.dumps(list(command)).decode(),
        "tty": "true" if tty else "false",
    }
    return f"/v1/client/allocation/{alloc_id}/exec?{urlencode(query)}"


@asynccontextmanager
async def open_exec(
    client: NomadConnection,
    alloc_id: str,
    *,
    task: str,
    command: Sequence[str],
    tty: bool = False,
    address: str = "",
    ssl_context: ssl.SSLContext | None = None,
    connect_timeout: float | None = None,
    tcp_timeout: float | None = None,
) -> AsyncIterator[ExecSession]:
    """Start ``command`` in ``task`` of allocation ``alloc_id``, on ``address`` (an agent's, with its
    ``ssl_context``) or the client's current server, upgraded within ``connect_timeout`` (default:
    the client's), of which the TCP connect may take ``tcp_timeout``.

    Only a connection that failed before the request could reach Nomad is NomadUnavailableError, safe
    to try elsewhere: NomadAddressUnreachable when the TCP connect failed or took too long, the base
    class when the TLS handshake failed. Once the request may have arrived, no answer in time is
    ExecConnectionLost: the command may be running, and nobody may run it a second time."""
    what = f"exec in allocation {alloc_id} task {task}"
    timeout = client.settings.exec_connect_timeout if connect_timeout is None else connect_timeout
    target = urlsplit(address or client.address)
    tls = target.scheme == "https"
    context = (ssl_context if address else client.ssl_context) if tls else None
    deadline = trio.current_time() + timeout
    try:
        host, port = target.hostname or "", target.port or (443 if tls else 80)
        # The connect itself is the check that the peer is there: no probe before it.
        with trio.fail_after(min(tcp_timeout or timeout, timeout)):
            tcp = await client.network.connect(host, port)
    except (OSError, ValueError, trio.TooSlowError) as exc:  # ValueError: a malformed address
        raise NomadAddressUnreachable(f"{what}: could not connect to {target.netloc}: {exc!r}") from exc
    stream: trio.abc.Stream = tcp
    if context is not None:
        with trio.move_on_at(deadline) as handshake:
            stream = await _over_tls(tcp, context, host, what)
        if handshake.cancelled_caught:  # _over_tls closed the connection; nothing was sent
            raise NomadUnavailableError(f"{what}: no TLS handshake with {target.netloc} within {timeout:g}s")
    headers = [(b"X-Nomad-Token", client.settings.token.encode())] if client.settings.token else []
    try:
        async with _upgraded(
            stream,
            host=target.netloc,
            resource=target.path + _exec_resource(client, alloc_id, task=task, command=command, tty=tty),
            headers=headers,
            deadline=deadline,
            close_timeout=client.settings.close_timeout,
            what=what,
        ) as session:
            yield session
    except trio_websocket.ConnectionRejected as exc:
        body = (exc.body or b"").decode("utf-8", errors="replace")
        if exc.status_code == 404:
            raise ExecAllocationUnknown(1008, body.strip() or "alloc not found") from exc
        error = translate_status(exc.status_code, body, what)
        raise (error or ExecConnectionLost(f"{what}: unexpected handshake status {exc.status_code}")) from exc
    finally:
        # trio-websocket leaves the socket of a connection that ended without a close frame (1006),
        # which is how Nomad ends every exec session, open (CLOSE-WAIT) for the garbage collector:
        # under load, hundreds of descriptors.
        await trio.aclose_forcefully(stream)


async def _over_tls(
    stream: trio.abc.Stream, context: ssl.SSLContext, host: str, what: str
) -> trio.SSLStream[trio.abc.Stream]:
    """``stream`` after its TLS handshake: nothing was sent before it, so a failure is safe to try
    elsewhere."""
    tls = trio.SSLStream(stream, context, server_hostname=host, https_compatible=True)
    try:
        await tls.do_handshake()
    except BaseException as exc:
        await trio.aclose_forcefully(stream)
        if isinstance(exc, trio.BrokenResourceError):
            cause = exc.__cause__ or exc
            raise NomadUnavailableError(f"{what}: the TLS handshake failed: {cause!r}") from exc
        raise
    return tls


@asynccontextmanager
async def _upgraded(
    stream: trio.abc.Stream,
    *,
    host: str,
    resource: str,
    headers: list[tuple[bytes, bytes]],
    deadline: float,
    close_timeout: float,
    what: str,
) -> AsyncIterator[ExecSession]:
    """The exec WebSocket over ``stream``, upgraded by ``deadline``. Its reader task's failures (a
    rejected upgrade) and the caller's come out alone, not in an exception group."""
    connected = False
    try:
        # The deadline covers the reader task too, which would otherwise wait on a peer that
        # accepted the connection and never answers; it is lifted once the upgrade came.
        with trio.CancelScope(deadline=deadline) as connecting:
            async with trio.open_nursery() as nursery:
                connection = await trio_websocket.wrap_client_stream(
                    nursery,
                    stream,  # type: ignore[arg-type]  # typed narrower than it is: any trio stream
                    host,
                    resource,
                    extra_headers=headers,
                    message_queue_size=_MESSAGE_QUEUE_SIZE,
                    max_message_size=_MAX_MESSAGE_SIZE,
                )
                if connecting.cancel_called:  # upgraded in the very tick the deadline passed
                    raise ExecConnectionLost(f"{what}: upgraded at the deadline; the outcome is unknown")
                connected = True
                connecting.deadline = math.inf
                session = ExecSession(connection, what)
                try:
                    yield session
                finally:
                    # Past close_timeout (a loaded peer) the transport is closed all the same, and
                    # the reader with it; the session's outcome stands.
                    try:
                        with trio.move_on_after(close_timeout):
                            await connection.aclose()
                    finally:
                        nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise_alone(group)
    if not connected:
        raise ExecConnectionLost(
            f"{what}: {host} accepted the connection and did not answer by the connect timeout; "
            "the outcome is unknown"
        )
