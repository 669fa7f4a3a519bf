"""The private attributes of h11 and trio the code reads, with the meaning it relies on. Where one is
gone the code falls back without a word (``getattr`` with a default), so an upgrade that removes or
changes one must fail here, loudly:

- ``http_wire``'s ``_chunk_line_broken``: h11's ``Connection._reader`` while a body is read, a
  ``ChunkedReader`` whose ``_bytes_in_chunk`` is 0 while it waits for a chunk's size line and whose
  ``_reading_trailer`` is True past the last chunk;
- ``tls``'s ``_send_alert``: trio's ``SSLStream._outgoing``, the ``ssl.MemoryBIO`` that holds the
  alert OpenSSL wrote for a handshake that failed, which trio leaves unsent.
"""

from __future__ import annotations

import ssl

import h11
import pytest
import trio
import trio.testing
import trustme
from h11._readers import ChunkedReader

HEAD = b"POST / HTTP/1.1\r\nHost: api\r\nTransfer-Encoding: chunked\r\n\r\n"


def reader_after(data: bytes) -> object:
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(data)
    assert isinstance(connection.next_event(), h11.Request)
    while connection.next_event() not in (h11.NEED_DATA, h11.PAUSED):
        pass
    return connection._reader


def test_h11_reads_a_chunked_body_with_a_chunked_reader_that_says_where_it_is() -> None:
    waiting = reader_after(HEAD + b"2\n")
    assert isinstance(waiting, ChunkedReader)
    assert waiting._bytes_in_chunk == 0, "it waits for a chunk's size line"
    assert waiting._reading_trailer is False

    inside = reader_after(HEAD + b"2\r\na")
    assert isinstance(inside, ChunkedReader)
    assert inside._bytes_in_chunk == 1, "one byte of the chunk is still to come"

    trailer = reader_after(HEAD + b"2\r\nab\r\n0\r\n")
    assert isinstance(trailer, ChunkedReader)
    assert trailer._reading_trailer is True, "past the last chunk: trailers"


def test_h11_waits_for_ever_on_a_size_line_ending_in_a_bare_lf() -> None:
    # The reason _chunk_line_broken exists: should h11 ever answer this itself, it can go.
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(HEAD + b"2\nab\n0\n\n")
    assert isinstance(connection.next_event(), h11.Request)
    assert connection.next_event() is h11.NEED_DATA
    assert bytes(connection.trailing_data[0]) == b"2\nab\n0\n\n"


async def test_trio_leaves_a_failed_handshakes_alert_in_ssl_streams_outgoing() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.minimum_version = ssl.TLSVersion.TLSv1_3
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    client_context.maximum_version = ssl.TLSVersion.TLSv1_2
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(client_in, client_out, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    hello = client_out.read()

    server_side, client_side = trio.testing.memory_stream_pair()
    server = trio.SSLStream(server_side, server_context, server_side=True)
    assert isinstance(server._outgoing, ssl.MemoryBIO)
    await client_side.send_all(hello)
    with pytest.raises(trio.BrokenResourceError):
        await server.do_handshake()
    assert server._outgoing.pending > 0, "the alert is left unsent"
    client_in.write(server._outgoing.read())
    with pytest.raises(ssl.SSLError, match=r"(?i)protocol.version"):
        client.do_handshake()
