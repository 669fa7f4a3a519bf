"""Certificates for the TLS tests, made by trustme: a CA, and server certificates for 127.0.0.1
that it signed, written as the PEM files ``[server.tls]`` names; and clients that trust the CA."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme
from attrs import frozen


@frozen
class Pair:
    """A certificate chain's file and its key's file."""

    cert_file: str
    key_file: str


class Certificates:
    """A CA, and server certificates it issues into ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.ca = trustme.CA()
        self.directory = directory

    def issue(self, name: str, *identities: str) -> Pair:
        """A certificate for 127.0.0.1 and ``identities``, written as ``name``.pem and ``name``.key."""
        issued = self.ca.issue_cert("127.0.0.1", *identities)
        cert, key = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        issued.private_key_pem.write_to_path(str(key))
        return Pair(str(cert), str(key))

    def client(self, *, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
        """A client context that trusts the CA; ``maximum``: the newest version it speaks."""
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if maximum is not None:
            context.maximum_version = maximum
        return context

    def ca_file(self) -> str:
        """The CA's certificate as a file (CodeOcean's ``ca_file``)."""
        path = self.directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(path))
        return str(path)


def subject_names(stream: object) -> list[str]:
    """The DNS names of the certificate a client's TLS stream was served."""
    peer = stream.getpeercert()  # type: ignore[attr-defined]
    return [value for kind, value in peer.get("subjectAltName", ()) if kind == "DNS"]
