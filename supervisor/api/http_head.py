"""What a request's head says, for the API's HTTP server: its path (without the query), its size, a
header's tokens, a WebSocket opening handshake's key, the peers' addresses, and the reason phrase of
a status. Plain functions of h11's events and trio's streams.
"""

from __future__ import annotations

import h11
import trio

from ..base.http_wire import reason_phrase

__all__ = [
    "address",
    "addresses",
    "declares_body",
    "handshake_key",
    "head_size",
    "header_tokens",
    "path",
    "reason",
]


def path(request: h11.Request) -> str:
    """The path as it came, without the query (it may hold secrets)."""
    return request.target.partition(b"?")[0].decode("latin-1")


def head_size(request: h11.Request) -> int:
    """The size of a request line and headers on the wire, give or take their whitespace."""
    fields = sum(len(name) + len(value) + 4 for name, value in request.headers)
    return len(request.method) + len(request.target) + 12 + fields


def declares_body(request: h11.Request) -> bool:
    """Whether the request has a body to come (chunked, or a Content-Length other than 0)."""
    return bool(header_tokens(request, b"transfer-encoding")) or any(
        token != b"0" for token in header_tokens(request, b"content-length")
    )


def header_tokens(request: h11.Request, name: bytes, *, lower: bool = True) -> list[bytes]:
    """The comma-separated tokens of a header, over all its lines."""
    tokens = [
        token.strip() for header, value in request.headers if header == name for token in value.split(b",")
    ]
    return [token.lower() for token in tokens] if lower else tokens


def handshake_key(request: h11.Request) -> bytes | None:
    """The Sec-WebSocket-Key of a valid opening handshake (RFC 6455, 4.2.1), else None."""
    headers = dict(request.headers)
    if request.method != b"GET" or b"upgrade" not in header_tokens(request, b"connection"):
        return None
    return (
        headers.get(b"sec-websocket-key") or None if headers.get(b"sec-websocket-version") == b"13" else None
    )


def addresses(stream: trio.abc.Stream) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    """The peer's and our own (host, port) on TCP; None for a stream that has none (in memory)."""
    if not isinstance(stream, trio.SocketStream):
        return None, None
    try:
        peer, own = stream.socket.getpeername(), stream.socket.getsockname()
    except OSError:  # the peer has already gone
        return None, None
    return (peer[0], peer[1]), (own[0], own[1])


def address(where: tuple[str, int] | None) -> str:
    """``host:port`` for the access log ("-" for a stream without one)."""
    if where is None:
        return "-"
    host, port = where
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def reason(status: int) -> bytes:
    """The status line's reason phrase, as Python's HTTP status list has it ("" if unknown)."""
    return reason_phrase(status)
