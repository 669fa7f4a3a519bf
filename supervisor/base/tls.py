"""The API served over TLS (``[server.tls]``): a server context made from a PEM certificate chain and
its private key, re-read on demand (SIGHUP) for the connections accepted after, and a listener that
wraps each accepted stream without handshaking in the accept loop: the handshake runs in the
connection's own task, on its first read or write, and must finish within a timeout.

As Poseidon: TLS 1.3 at least by default. Its curves (P-521, P-384, P-256) cannot all be named
through Python's ``ssl``, which sets one group only; OpenSSL's default groups, which hold them, are
kept. TLS 1.3's cipher suites are OpenSSL's (AES-GCM and ChaCha20-Poly1305, as Go's); with
``min_version = "1.2"``, TLS 1.2 takes ECDHE key exchange with AEAD ciphers only.
"""

from __future__ import annotations

import contextlib
import ssl
from pathlib import Path
from typing import Final, final

import trio
from loguru import logger

from .errors import ConfigError

__all__ = ["TLS_VERSIONS", "ServerTls", "TlsListener", "TlsStream", "is_tls", "server_context"]

TLS_VERSIONS: Final = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
_TLS12_CIPHERS: Final = "ECDHE+AESGCM:ECDHE+CHACHA20"
# How long a failed handshake's alert may take to go out (seconds).
_ALERT_TIMEOUT: Final = 1.0


def _read(key: str, path: str, marker: bytes, what: str) -> None:
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key} {path}: cannot be read: {exc.strerror or exc}") from None
    if marker not in text:
        raise ConfigError(f"{key} {path}: not {what} in PEM")


def _no_password() -> bytes:
    return b""


def server_context(cert_file: str, key_file: str, min_version: str = "1.3") -> ssl.SSLContext:
    """A server context serving ``cert_file``'s chain with ``key_file``'s key; ConfigError naming
    the file that cannot be read or does not fit."""
    _read("server.tls.cert_file", cert_file, b"-----BEGIN CERTIFICATE-----", "a certificate")
    _read("server.tls.key_file", key_file, b"PRIVATE KEY-----", "a private key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[min_version]
    context.set_ciphers(_TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])
    try:
        context.load_cert_chain(cert_file, key_file, password=_no_password)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"server.tls.key_file {key_file}: not the private key of the certificate in {cert_file}"
            ) from None
        raise ConfigError(
            f"server.tls.cert_file {cert_file}, server.tls.key_file {key_file}: do not load "
            f"({exc.reason or exc}; an encrypted key is not supported)"
        ) from None
    except OSError as exc:  # a file gone since it was read
        raise ConfigError(f"server.tls: {cert_file}, {key_file}: {exc.strerror or exc}") from None
    return context


@final
class ServerTls:
    """The TLS the API serves: the context new connections take, swapped by ``reload``."""

    def __init__(self, cert_file: str, key_file: str, min_version: str, handshake_timeout: float) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.min_version = min_version
        self.handshake_timeout = handshake_timeout
        self.context = server_context(cert_file, key_file, min_version)

    def reload(self) -> str | None:
        """Read the certificate and key again: connections accepted from now on get them, the open
        ones keep theirs. A pair that does not load changes nothing; its error is returned."""
        try:
            self.context = server_context(self.cert_file, self.key_file, self.min_version)
        except ConfigError as error:
            logger.error("SIGHUP: the TLS certificate does not load, the old one is kept: {}", error)
            return str(error)
        logger.info("SIGHUP: reloaded the TLS certificate {} and key {}", self.cert_file, self.key_file)
        return None

    def wrap(self, listener: trio.abc.Listener[trio.abc.Stream]) -> TlsListener:
        """``listener``'s connections, over TLS."""
        return TlsListener(listener, self)


@final
class TlsStream(trio.abc.Stream):
    """A server's TLS stream whose handshake, run by the first read or write, fails (the stream is
    broken) when it has not finished within the timeout."""

    def __init__(self, transport: trio.abc.Stream, context: ssl.SSLContext, timeout: float) -> None:
        self.tls = trio.SSLStream(transport, context, server_side=True, https_compatible=True)
        self._timeout = timeout
        self._handshook = False

    @property
    def transport_stream(self) -> trio.abc.Stream:
        """The stream under TLS (a TCP connection)."""
        return self.tls.transport_stream

    async def _handshake(self) -> None:
        if self._handshook:
            return
        with trio.move_on_after(self._timeout) as timer:
            try:
                await self.tls.do_handshake()
            except trio.BrokenResourceError as broken:
                logger.debug("a TLS handshake failed: {}", broken.__cause__ or broken)
                await self._send_alert()
                raise
        if timer.cancelled_caught:
            raise trio.BrokenResourceError(f"no TLS handshake within {self._timeout:g}s")
        self._handshook = True

    async def _send_alert(self) -> None:
        """Send the alert OpenSSL wrote for a failed handshake (a TLS 1.2 client's "protocol
        version"), which trio leaves unsent: the client learns why, not only that it ended."""
        pending = getattr(self.tls, "_outgoing", None)  # trio's outgoing buffer: not public
        if isinstance(pending, ssl.MemoryBIO) and pending.pending:
            with (
                trio.move_on_after(_ALERT_TIMEOUT),
                contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
            ):
                await self.tls.transport_stream.send_all(pending.read())

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        """Bytes from the peer, once the handshake is done."""
        await self._handshake()
        return await self.tls.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data``, once the handshake is done."""
        await self._handshake()
        await self.tls.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        """Wait until a send would not block."""
        await self.tls.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Close with TLS's close_notify, then the transport."""
        await self.tls.aclose()


@final
class TlsListener(trio.abc.Listener[trio.abc.Stream]):
    """Wraps each connection ``listener`` accepts in TLS, with the context ``tls`` holds at that
    moment; the handshake is the connection's own (``TlsStream``)."""

    def __init__(self, listener: trio.abc.Listener[trio.abc.Stream], tls: ServerTls) -> None:
        self.listener = listener
        self._tls = tls

    async def accept(self) -> trio.abc.Stream:
        """The next connection, its handshake still to come."""
        transport = await self.listener.accept()
        return TlsStream(transport, self._tls.context, self._tls.handshake_timeout)

    async def aclose(self) -> None:
        """Close the listener under TLS."""
        await self.listener.aclose()


def is_tls(stream: trio.abc.Stream) -> bool:
    """Whether the connection is served over TLS."""
    return isinstance(stream, TlsStream | trio.SSLStream)
