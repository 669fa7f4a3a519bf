"""httpx's requests to Nomad carried over the network seam (``supervisor.base.network``).

httpcore, under httpx, takes a network backend: the one here opens its connections with the
``Network`` it is given, so the Nomad client speaks to a real cluster over TCP, or to a simulated one
over in-memory streams, through the same code. Errors come out as httpx's own, mapped from
httpcore's as httpx maps them, so the boundary (``boundary.py``) sees one kind of error either way.
"""

from __future__ import annotations

import contextlib
import select
import ssl
import typing
from collections.abc import Iterable, Iterator
from typing import Final

import httpcore
import httpx
import trio

from ..base.network import Network

__all__ = ["network_transport"]

# httpx's own defaults: connections kept open at most, and for how long idle.
_MAX_CONNECTIONS: Final = 100
_MAX_KEEPALIVE: Final = 20
_KEEPALIVE_EXPIRY: Final = 5.0
_READ_SIZE: Final = 65536

# Most specific first: the first match wins.
_ERRORS: Final[tuple[tuple[type[Exception], type[httpx.HTTPError]], ...]] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for theirs, ours in _ERRORS:
            if isinstance(exc, theirs):
                raise ours(str(exc)) from exc
        raise


@contextlib.contextmanager
def _timeout(seconds: float | None, error: type[Exception]) -> Iterator[None]:
    try:
        with trio.fail_after(seconds if seconds is not None else float("inf")):
            yield
    except trio.TooSlowError as exc:
        raise error(f"no progress within {seconds}s") from exc


class _Stream(httpcore.AsyncNetworkStream):
    """A trio stream as httpcore reads and writes it."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        with _timeout(timeout, httpcore.ReadTimeout):
            try:
                data = await self._stream.receive_some(max_bytes)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise httpcore.ReadError(str(exc) or "the connection broke") from exc
        return data if isinstance(data, bytes) else bytes(data)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        with _timeout(timeout, httpcore.WriteTimeout):
            try:
                await self._stream.send_all(buffer)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise httpcore.WriteError(str(exc) or "the connection broke") from exc

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self._stream)

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's signature
    ) -> httpcore.AsyncNetworkStream:
        tls = trio.SSLStream(
            self._stream, ssl_context, server_hostname=server_hostname, https_compatible=True
        )
        with _timeout(timeout, httpcore.ConnectTimeout):
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as exc:
                await trio.aclose_forcefully(self._stream)
                raise httpcore.ConnectError(f"the TLS handshake failed: {exc.__cause__ or exc!r}") from exc
        return _Stream(tls)

    def get_extra_info(self, info: str) -> typing.Any:
        if info == "is_readable":  # an idle connection that is readable was closed by its server
            return _readable(self._stream)
        return None  # no "ssl_object": without it httpcore speaks HTTP/1.1, which is all Nomad needs


def _readable(stream: trio.abc.Stream) -> bool:
    """Whether a socket under ``stream`` has something to read (or its end) now; False for a stream
    without a socket."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return False
    fd = stream.socket.fileno()
    return fd < 0 or bool(select.select([fd], [], [], 0)[0])


class _Backend(httpcore.AsyncNetworkBackend):
    def __init__(self, network: Network) -> None:
        self._network = network

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's signature
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with _timeout(timeout, httpcore.ConnectTimeout):
            try:
                return _Stream(await self._network.connect(host, port))
            except OSError as exc:
                raise httpcore.ConnectError(str(exc)) from exc

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's signature
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.UnsupportedProtocol("Unix sockets are not used")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class _ResponseBody(httpx.AsyncByteStream):
    """httpcore's body as httpx reads it; an iterator, not an async generator, so that a body left
    unread is no generator for the garbage collector to finalize."""

    def __init__(self, body: typing.AsyncIterable[bytes]) -> None:
        self._body = body
        self._parts: typing.AsyncIterator[bytes] | None = None

    def __aiter__(self) -> _ResponseBody:
        self._parts = self._body.__aiter__()
        return self

    async def __anext__(self) -> bytes:
        assert self._parts is not None
        with _as_httpx_errors():
            return await self._parts.__anext__()

    async def aclose(self) -> None:
        closing = getattr(self._body, "aclose", None)
        if closing is not None:
            with _as_httpx_errors():
                await closing()


class _NetworkTransport(httpx.AsyncBaseTransport):
    def __init__(self, network: Network, ssl_context: ssl.SSLContext | None) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=_MAX_CONNECTIONS,
            max_keepalive_connections=_MAX_KEEPALIVE,
            keepalive_expiry=_KEEPALIVE_EXPIRY,
            network_backend=_Backend(network),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            response = await self._pool.handle_async_request(core_request)
        assert isinstance(response.stream, typing.AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseBody(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def network_transport(
    network: Network, ssl_context: ssl.SSLContext | None = None
) -> httpx.AsyncBaseTransport:
    """An httpx transport whose connections ``network`` opens (TLS with ``ssl_context``, or httpx's
    default trust when None)."""
    return _NetworkTransport(network, ssl_context or httpx.create_ssl_context())
