"""The API's TLS (``[server.tls]``): the context from the files, a TLS 1.3 client served and a TLS 1.2
one refused, a handshake that never comes neither blocking the accept loop nor holding its
connection, and the certificate re-read for new connections only. Real sockets on 127.0.0.1, and
certificates made by trustme."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from starlette.types import Receive, Scope, Send

from supervisor.api.http_server import AsgiServer, HttpServerSettings
from supervisor.base.errors import ConfigError
from supervisor.base.network import Listening, TcpNetwork
from supervisor.base.tls import ServerTls, server_context
from supervisor.core.config import load_settings
from supervisor.core.config_schema import Settings, TlsSettings
from supervisor.ops.check import tls_result
from supervisor.ops.check_result import Status

from .http_serving import HttpClient
from .tls_certificates import Certificates, Pair, subject_names


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


async def scheme_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers each request with its scope's scheme."""
    if scope["type"] != "http":
        return
    body = scope["scheme"].encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]}
    )
    await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def tls_server(tls: ServerTls) -> AsyncIterator[tuple[int, str]]:
    """The scheme app served over ``tls`` on 127.0.0.1; its port and its URL."""
    listening = await TcpNetwork().listen("127.0.0.1", 0)
    wrapped = Listening(tls.wrap(listening.listener), listening.host, listening.port)
    server = AsgiServer(scheme_app, HttpServerSettings())
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.serve, wrapped)
        yield listening.port, url
        nursery.cancel_scope.cancel()


def replace(pair: Pair, by: Pair) -> None:
    """Write ``by``'s files over ``pair``'s, as a renewal does."""
    Path(pair.cert_file).write_bytes(Path(by.cert_file).read_bytes())
    Path(pair.key_file).write_bytes(Path(by.key_file).read_bytes())


async def connect(
    port: int, certificates: Certificates, **options: ssl.TLSVersion
) -> trio.SSLStream[trio.SocketStream]:
    stream = await trio.open_ssl_over_tcp_stream(
        "127.0.0.1", port, ssl_context=certificates.client(**options), https_compatible=True
    )
    await stream.do_handshake()
    return stream


async def test_a_tls13_client_is_served_as_https(certificates: Certificates) -> None:
    pair = certificates.issue("api")
    async with tls_server(ServerTls(pair.cert_file, pair.key_file, "1.3", 5.0)) as (port, _):
        stream = await connect(port, certificates)
        assert stream.version() == "TLSv1.3"
        response, body = await HttpClient(stream).request("GET", "/")
        assert (response.status_code, body) == (200, b"https")
        await stream.aclose()


async def test_a_tls12_client_is_refused_by_default(certificates: Certificates) -> None:
    pair = certificates.issue("api")
    async with tls_server(ServerTls(pair.cert_file, pair.key_file, "1.3", 5.0)) as (port, _):
        with pytest.raises(trio.BrokenResourceError) as refused:
            await connect(port, certificates, maximum=ssl.TLSVersion.TLSv1_2)
        # The client is told why: OpenSSL's alert goes out before the connection closes.
        assert isinstance(refused.value.__cause__, ssl.SSLError)
        assert "PROTOCOL_VERSION" in str(refused.value.__cause__).upper()
        stream = await connect(port, certificates)
        assert stream.version() == "TLSv1.3"
        await stream.aclose()


async def test_min_version_12_serves_a_tls12_client(certificates: Certificates) -> None:
    pair = certificates.issue("api")
    async with tls_server(ServerTls(pair.cert_file, pair.key_file, "1.2", 5.0)) as (port, _):
        stream = await connect(port, certificates, maximum=ssl.TLSVersion.TLSv1_2)
        assert stream.version() == "TLSv1.2"
        _, body = await HttpClient(stream).request("GET", "/")
        assert body == b"https"
        await stream.aclose()


async def test_a_handshake_that_never_comes_holds_neither_the_accept_loop_nor_its_connection(
    certificates: Certificates,
) -> None:
    pair = certificates.issue("api")
    timeout = 2.0
    async with tls_server(ServerTls(pair.cert_file, pair.key_file, "1.3", timeout)) as (port, _):
        began = trio.current_time()
        silent = await trio.open_tcp_stream("127.0.0.1", port)
        # Served meanwhile: the silent client's handshake is its own task's.
        stream = await connect(port, certificates)
        response, _ = await HttpClient(stream).request("GET", "/")
        assert response.status_code == 200
        served = trio.current_time()
        with trio.fail_after(timeout + 5):
            assert await silent.receive_some() == b""
        closed = trio.current_time()
        # Were the accept loop to wait for the silent client's handshake, the other would wait too.
        assert served - began < timeout
        assert closed - began >= timeout
        await silent.aclose()
        await stream.aclose()


async def test_reload_serves_the_new_certificate_to_new_connections_only(certificates: Certificates) -> None:
    first = certificates.issue("api", "first.example")
    tls = ServerTls(first.cert_file, first.key_file, "1.3", 5.0)
    async with tls_server(tls) as (port, _):
        before = await connect(port, certificates)
        assert "first.example" in subject_names(before)
        second = certificates.issue("second", "second.example")
        replace(first, second)
        assert tls.reload() is None
        after = await connect(port, certificates)
        assert "second.example" in subject_names(after)
        # The connection opened before goes on, with the certificate it had.
        _, body = await HttpClient(before).request("GET", "/")
        assert body == b"https"
        assert "first.example" in subject_names(before)
        await before.aclose()
        await after.aclose()


async def test_a_bad_pair_on_reload_keeps_the_old_one(
    certificates: Certificates, log_records: list[Any]
) -> None:
    pair = certificates.issue("api", "kept.example")
    tls = ServerTls(pair.cert_file, pair.key_file, "1.3", 5.0)
    async with tls_server(tls) as (port, _):
        other = certificates.issue("other")
        replace(pair, Pair(pair.cert_file, other.key_file))  # not the certificate's key
        error = tls.reload()
        assert error is not None
        assert pair.key_file in error
        stream = await connect(port, certificates)
        assert "kept.example" in subject_names(stream)
        await stream.aclose()
    assert any("the old one is kept" in record["message"] for record in log_records)


def test_each_file_problem_names_the_file(certificates: Certificates, tmp_path: Path) -> None:
    pair = certificates.issue("api")
    other = certificates.issue("other")
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match=f"server.tls.cert_file {missing}: cannot be read"):
        server_context(missing, pair.key_file)
    with pytest.raises(ConfigError, match=f"server.tls.key_file {pair.cert_file}: not a private key"):
        server_context(pair.cert_file, pair.cert_file)
    with pytest.raises(ConfigError, match=f"server.tls.cert_file {pair.key_file}: not a certificate"):
        server_context(pair.key_file, pair.key_file)
    with pytest.raises(ConfigError, match=f"server.tls.key_file {other.key_file}: not the private key"):
        server_context(pair.cert_file, other.key_file)


def test_both_files_or_neither(tmp_path: Path) -> None:
    config = tmp_path / "supervisor.toml"
    config.write_text('[server.tls]\ncert_file = "/etc/supervisor/api.pem"\n')
    with pytest.raises(ConfigError, match=r"server.tls.key_file: required with server.tls.cert_file"):
        load_settings(config, {})
    config.write_text('[server.tls]\nkey_file = "/etc/supervisor/api.key"\n')
    with pytest.raises(ConfigError, match=r"server.tls.cert_file: required with server.tls.key_file"):
        load_settings(config, {})


def test_check_fails_on_an_unreadable_certificate_and_passes_a_good_one(
    certificates: Certificates, tmp_path: Path
) -> None:
    assert tls_result(Settings()) is None
    pair = certificates.issue("api")
    good = tls_result(Settings(server_tls=TlsSettings(cert_file=pair.cert_file, key_file=pair.key_file)))
    assert good is not None
    assert good.status is Status.OK
    missing = str(tmp_path / "gone.pem")
    bad = tls_result(Settings(server_tls=TlsSettings(cert_file=missing, key_file=pair.key_file)))
    assert bad is not None
    assert bad.status is Status.FAIL
    assert missing in bad.detail
