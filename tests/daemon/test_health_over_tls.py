"""``supervisor health`` against a daemon that serves TLS with a private CA's certificate: OK with
``--ca-file`` naming the CA, UNKNOWN without it (the certificate is not trusted) or over http://
(with a hint), and a CA file that does not load is UNKNOWN in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from supervisor.base.levels import StreamState
from supervisor.cli import main
from supervisor.core.config import ServerSettings, Settings, TlsSettings

from ..tls_certificates import Certificates
from .conftest import Harness


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@pytest.fixture
def settings(certificates: Certificates) -> Settings:
    pair = certificates.issue("api", "localhost")
    return Settings(
        server=ServerSettings(port=0),
        server_tls=TlsSettings(cert_file=pair.cert_file, key_file=pair.key_file),
    )


async def test_the_probe_trusts_a_private_ca_given_with_ca_file(
    harness: Harness,
    certificates: Certificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = harness.daemon.addresses[0]
    assert url.startswith("https://127.0.0.1:")
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)

    async def health(*argv: str) -> tuple[int, str]:
        code = await trio.to_thread.run_sync(main, ["health", "--timeout", "10", *argv])
        return code, capsys.readouterr().out

    # The stream comes up after the API serves: until then the probe rightly says WARNING.
    await harness.wait_for(lambda: harness.service.gate.state is StreamState.UP)
    code, text = await health("--url", url, "--ca-file", certificates.ca_file())
    assert (code, text.split(":")[0]) == (0, "OK"), text

    code, text = await health("--url", url)
    assert code == 3
    assert text == (
        f"UNKNOWN: the supervisor at {url} cannot be reached: its certificate is not trusted (unable "
        "to get local issuer certificate); pass the CA certificate that issued it with --ca-file\n"
    )

    code, text = await health("--url", url.replace("https://", "http://"))
    assert code == 3
    assert text.endswith("(if it serves TLS, probe its https:// URL, with --ca-file for a private CA)\n")

    # 127.1 reaches 127.0.0.1, but is no name the certificate holds.
    code, text = await health("--url", url.replace("127.0.0.1", "127.1"), "--ca-file", certificates.ca_file())
    assert code == 3
    assert "its certificate is not trusted (Hostname mismatch" in text
    assert text.endswith("; give --url a host its certificate names\n")

    other = Certificates(tmp_path / "other")
    (tmp_path / "other").mkdir()
    code, text = await health("--url", url, "--ca-file", other.ca_file())
    assert code == 3
    assert "its certificate is not trusted" in text, "another CA's certificate does not make it trusted"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file or directory"),
        (b"", "no PEM CA certificate in it (NO_CERTIFICATE_OR_CRL_FOUND)"),
        (b"not a certificate\n", "no PEM CA certificate in it (NO_CERTIFICATE_OR_CRL_FOUND)"),
    ],
)
def test_a_ca_file_that_does_not_load_is_unknown_in_one_line(
    content: bytes | None, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_bytes(content)
    assert main(["health", "--url", "https://127.0.0.1:7200", "--ca-file", str(path)]) == 3
    assert capsys.readouterr().out == f"UNKNOWN: --ca-file {path}: {message}\n"


def test_a_ca_file_for_a_plain_http_url_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca_file = Certificates(tmp_path).ca_file()
    assert main(["health", "--url", "http://127.0.0.1:7200", "--ca-file", ca_file]) == 3
    assert capsys.readouterr().out == (
        f"UNKNOWN: --ca-file {ca_file}: it is for an https:// --url, not http://127.0.0.1:7200\n"
    )
