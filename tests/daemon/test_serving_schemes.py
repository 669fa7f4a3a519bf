"""The execution URL's scheme: ``wss://`` when the API serves TLS, or when a trusted proxy says the
client came over HTTPS; ``ws://`` when an untrusted one says so. A real daemon on 127.0.0.1 against
the simulated cluster, the proxy's headers sent as a proxy would."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio
import trio_websocket

from supervisor.core.config import ServerSettings, Settings, TlsSettings

from ..tls_certificates import Certificates
from .conftest import ENVIRONMENT, MESSAGES, Harness


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@pytest.fixture
def settings(request: pytest.FixtureRequest, certificates: Certificates) -> Settings:
    kind = getattr(request, "param", "plain")
    if kind == "tls":
        pair = certificates.issue("api", "localhost")
        return Settings(
            server=ServerSettings(port=0),
            server_tls=TlsSettings(cert_file=pair.cert_file, key_file=pair.key_file),
        )
    if kind == "proxy elsewhere":
        return Settings(server=ServerSettings(port=0, forwarded_allow_ips=("10.0.0.0/8",)))
    return Settings(server=ServerSettings(port=0))


async def read_to_the_end(url: str, **options: object) -> str:
    output = ""
    async with trio_websocket.open_websocket_url(url, **options) as ws:  # type: ignore[arg-type]
        with pytest.raises(trio_websocket.ConnectionClosed), trio.fail_after(20):
            while True:
                message = json.loads(await ws.get_message())
                MESSAGES.validate(message)
                output += message.get("data", "") if message["type"] == "stdout" else ""
    return output


@pytest.mark.parametrize("settings", ["tls"], indirect=True)
async def test_over_tls_the_url_is_wss_and_the_execution_runs_over_it(
    harness: Harness, certificates: Certificates
) -> None:
    assert harness.daemon.addresses[0].startswith("https://127.0.0.1:")
    client = certificates.client()
    async with httpx.AsyncClient(base_url=harness.daemon.addresses[0] + "/api/v1", verify=client) as http:
        await http.put("/execution-environments/10", json=ENVIRONMENT)
        await harness.wait_for(lambda: harness.idle(10) > 0)
        claimed = await http.post("/runners", json={"executionEnvironmentId": 10, "inactivityTimeout": 0})
        runner = claimed.json()["runnerId"]
        response = await http.post(f"/runners/{runner}/execute", json={"command": "echo over tls"})
    url = response.json()["websocketUrl"]
    assert url.startswith(f"wss://{harness.daemon.addresses[0].removeprefix('https://')}/api/v1/runners/")
    assert (await read_to_the_end(url, ssl_context=client)).strip() == "over tls"


async def execution_url(harness: Harness, *headers: tuple[str, str]) -> str:
    await harness.environment()
    runner = await harness.runner()
    response = await harness.http.post(
        f"/runners/{runner}/execute", json={"command": "true"}, headers=headers
    )
    assert response.status_code == 200, response.text
    return str(response.json()["websocketUrl"])


async def test_a_trusted_proxy_that_says_https_gets_wss(harness: Harness) -> None:
    # The test's client is on loopback, which forwarded_allow_ips trusts by default.
    url = await execution_url(harness, ("X-Forwarded-Proto", "https"), ("Host", "runners.example.org"))
    assert url.startswith("wss://runners.example.org/api/v1/runners/")
    url = await execution_url(harness, ("Forwarded", 'for="[2001:db8::1]";proto=https'))
    assert url.startswith("wss://")
    assert (await execution_url(harness)).startswith("ws://")


@pytest.mark.parametrize("settings", ["proxy elsewhere"], indirect=True)
async def test_an_untrusted_proxy_that_says_https_gets_ws(harness: Harness) -> None:
    url = await execution_url(harness, ("X-Forwarded-Proto", "https"), ("Forwarded", "proto=https"))
    assert url.startswith("ws://")
