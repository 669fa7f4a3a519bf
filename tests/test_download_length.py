"""A download's ``Content-Length``: sent as the file's size, and never claimed for a body that is not
the file. A file that runs short or over while it is sent ends its response short of that length,
and the connection closes, so that the client sees a body cut short.

Rules of these tests: pytest-trio's ``trio_mode``; the API's own HTTP server on a MemoryNetwork
(``tests/http_serving.py``), each test capped there on trio's clock; a client speaking h11, so
that the bytes on the wire are the test's.
"""

from __future__ import annotations

from collections.abc import Sequence

import h11
import pytest
import trio
from starlette.types import ASGIApp, Receive, Scope, Send

from supervisor.api.app import _DownloadResponse
from supervisor.desk.files import Download, _DownloadItem, _Ended

from .http_serving import HttpClient, serving


def download_app(size: int | None, items: Sequence[_DownloadItem], released: list[bool]) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        sender, receiver = trio.open_memory_channel[_DownloadItem](len(items) + 1)
        for item in items[1:]:
            sender.send_nowait(item)
        sender.close()
        headers = {} if size is None else {"Content-Length": str(size)}
        download = Download(items[0], receiver, "/data/file.bin", size)
        response = _DownloadResponse(
            download, lambda: released.append(True), "/data/file.bin", headers=headers
        )
        await response(scope, receive, send)

    return app


async def received(client: HttpClient) -> tuple[h11.Response, bytes, bool]:
    """The head, the body's bytes, and whether the body was complete."""
    await client.send(h11.Request(method="GET", target="/", headers=[("host", "api")]), h11.EndOfMessage())
    head = await client.next_event()
    assert isinstance(head, h11.Response)
    body = b""
    while True:
        try:
            event = await client.next_event()
        except h11.RemoteProtocolError:
            return head, body, False
        if isinstance(event, h11.EndOfMessage):
            return head, body, True
        body += event.data


async def test_a_file_of_its_size_is_sent_whole_with_its_length() -> None:
    released: list[bool] = []
    app = download_app(10, [b"01234", b"56789", _Ended(0, b"")], released)
    async with serving(app) as served:
        client = await served.client()
        head, body, complete = await received(client)
        assert (head.status_code, body, complete) == (200, b"0123456789", True)
        assert (b"content-length", b"10") in head.headers
        assert (b"transfer-encoding", b"chunked") not in head.headers
    assert released == [True]


@pytest.mark.parametrize(
    ("items", "delivered"),
    [
        ([b"01234", _Ended(0, b"")], b"01234"),  # shrank while it was sent
        ([b"0123456789", b"X", _Ended(0, b"")], b"012345678"),  # grew: the last byte is held back
        ([b"0123456", b"789AB", _Ended(0, b"")], b"0123456"),  # grew within a chunk
        ([b"0123456789AB", _Ended(0, b"")], b""),
    ],
)
async def test_a_file_that_changes_size_while_it_is_sent_ends_short_and_closes(
    items: list[_DownloadItem], delivered: bytes
) -> None:
    released: list[bool] = []
    async with serving(download_app(10, items, released)) as served:
        client = await served.client()
        head, body, complete = await received(client)
        assert (head.status_code, (b"content-length", b"10") in head.headers) == (200, True)
        assert (body, complete) == (delivered, False), "never a whole body that is not the file"
        assert await client.closed_by_server()
    assert released == [True]


async def test_an_unknown_size_is_sent_chunked() -> None:
    released: list[bool] = []
    app = download_app(None, [b"Linux version", b" 6.1\n", _Ended(0, b"")], released)
    async with serving(app) as served:
        client = await served.client()
        head, body, complete = await received(client)
        assert (body, complete) == (b"Linux version 6.1\n", True)
        assert (b"transfer-encoding", b"chunked") in head.headers
