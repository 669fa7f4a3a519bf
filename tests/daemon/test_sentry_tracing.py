"""Performance traces in Sentry: the daemon's requests continued from the caller's ``sentry-trace``
and ``baggage`` headers, captured by a transport of sentry-sdk's own kind (no network).

A claim, a file copy, a download and an execution (its POST and its WebSocket) each become a
transaction in the caller's trace, under the caller's span, with Poseidon's span names and the
environment and outcome as tags; the caller's sample decision stands over our rate; no header starts
a trace of our own; rate 0 traces nothing. No envelope holds the token or a copied file's content.
The daemon and the simulated cluster run on the real clock, as every test of this folder does
(``conftest.py``); the executions here are ``echo`` and take milliseconds.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
import trio_websocket
from loguru import logger
from sentry_sdk import integrations
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.loguru import LoguruIntegration
from sentry_sdk.integrations.starlette import StarletteIntegration
from sentry_sdk.transport import Transport

from supervisor.core.config import LogSettings, ServerSettings, Settings
from supervisor.ops.logs import configure_logging
from supervisor.ops.sentry import init_sentry
from supervisor.ops.tracing import tracing_enabled

from .conftest import Harness, output

TOKEN = "poseidon-token-0123456789"
TRACE_ID = "771a43a4192642f0b136d5159a501700"
PARENT = "b136d5159a501700"
CONTENT = "print('the student wrote this')\n"
RELEASE = "poseidon-replacement@2026.12"


class CapturingTransport(Transport):
    """Keeps every envelope, as serialised for the wire, and the transactions in them, and counts
    the transactions left unsampled. The client hands them over in the task that finishes the
    transaction, so that ``Harness.wait_for`` wakes on it."""

    def __init__(self) -> None:
        super().__init__()
        self.wire: list[bytes] = []
        self.transactions: list[dict[str, Any]] = []
        self.unsampled = 0

    def record_lost_event(
        self, reason: str, data_category: Any = None, item: Any = None, *, quantity: int = 1
    ) -> None:
        if reason == "sample_rate" and data_category == "transaction":
            self.unsampled += quantity

    def capture_envelope(self, envelope: Envelope) -> None:
        self.wire.append(envelope.serialize())
        self.transactions += [
            item.payload.json for item in envelope.items if item.type == "transaction" and item.payload.json
        ]

    def named(self, name: str) -> list[dict[str, Any]]:
        return [t for t in self.transactions if t["transaction"] == name]

    async def wait_for(self, harness: Harness, name: str) -> dict[str, Any]:
        """The one transaction of that name, once it is finished (after the answer is sent)."""
        await harness.wait_for(lambda: bool(self.named(name)))
        transactions = self.named(name)
        assert len(transactions) == 1, transactions
        return transactions[0]


@pytest.fixture
def sample_rate() -> float:
    return 1.0


@pytest.fixture
def captured(sample_rate: float) -> Iterator[CapturingTransport]:
    """Sentry started as ``supervisor run`` starts it, after the log is configured; afterwards the
    log as pytest had it, and sentry-sdk made to install its loguru integration again at the next
    start (it does so once a process, and configuring the log removes its handlers), with no
    breadcrumb of these tests left over."""
    transport = CapturingTransport()
    configure_logging(LogSettings(), [TOKEN], io.StringIO())
    environ = {
        "SENTRY_DSN": "https://public@sentry.invalid/1",
        "SENTRY_TRACES_SAMPLE_RATE": str(sample_rate),
        "SENTRY_RELEASE": RELEASE,
    }
    # No secret to mask: the token must never reach an envelope at all (no header is recorded).
    assert init_sentry(environ, [], transport=transport)
    yield transport
    sentry_sdk.get_client().close()
    sentry_sdk.init()
    # The daemon's tasks left their breadcrumbs in the scopes they share with this thread.
    sentry_sdk.get_isolation_scope().clear()
    sentry_sdk.get_current_scope().clear()
    logger.remove()
    logger.add(sys.stderr)
    logging.basicConfig(handlers=[], force=True)
    for installed in (integrations._processed_integrations, integrations._installed_integrations):
        installed.discard(LoguruIntegration.identifier)


@pytest.fixture
def settings(captured: CapturingTransport) -> Settings:
    """With a token, which no envelope may hold; Sentry started first, as ``supervisor run`` does."""
    return Settings(server=ServerSettings(port=0, token=TOKEN))


def trace_headers(sampled: str = "-1", **baggage: str) -> dict[str, str]:
    headers = {"sentry-trace": f"{TRACE_ID}-{PARENT}{sampled}"}
    if baggage:
        headers["baggage"] = ",".join(f"sentry-{key}={value}" for key, value in baggage.items())
    return headers


def continued(transaction: dict[str, Any]) -> bool:
    trace = transaction["contexts"]["trace"]
    return bool(trace["trace_id"] == TRACE_ID and trace["parent_span_id"] == PARENT)


def span_ops(transaction: dict[str, Any]) -> list[str]:
    return [span["op"] for span in transaction["spans"]]


async def claim(harness: Harness, headers: dict[str, str], environment_id: int = 10) -> str:
    await harness.wait_for(lambda: harness.idle(environment_id) > 0)
    body = {"executionEnvironmentId": environment_id, "inactivityTimeout": 0}
    response = await harness.http.post("/runners", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return str(response.json()["runnerId"])


def assert_nothing_secret(captured: CapturingTransport) -> None:
    sentry_sdk.flush()
    wire = b"".join(captured.wire)
    assert captured.wire
    assert TOKEN.encode() not in wire
    for secret in (CONTENT, base64.b64encode(CONTENT.encode()).decode()):
        assert secret.encode() not in wire


async def test_a_claim_continues_codeoceans_trace(captured: CapturingTransport, harness: Harness) -> None:
    await harness.environment(10)
    await claim(harness, trace_headers())
    transaction = await captured.wait_for(harness, "POST /api/v1/runners")
    assert continued(transaction)
    assert transaction["contexts"]["trace"]["op"] == "http.server"
    assert transaction["transaction_info"] == {"source": "route"}
    assert "api.runner.claim" in span_ops(transaction)
    assert transaction["tags"]["environment_id"] == "10"
    assert transaction["tags"]["outcome"] == "ok"
    assert transaction["release"] == RELEASE
    assert_nothing_secret(captured)


async def test_a_refused_claim_says_why(captured: CapturingTransport, harness: Harness) -> None:
    await harness.environment(10, prewarmingPoolSize=0)
    for done, (environment_id, status) in enumerate(((10, 500), (99, 404)), start=1):
        body = {"executionEnvironmentId": environment_id, "inactivityTimeout": 0}
        response = await harness.http.post("/runners", json=body, headers=trace_headers())
        assert response.status_code == status, response.text
        await harness.wait_for(lambda: len(captured.named("POST /api/v1/runners")) == done)  # noqa: B023
    refusals = {}
    for transaction in captured.named("POST /api/v1/runners"):
        refusals[transaction["tags"]["environment_id"]] = (
            transaction["tags"]["outcome"],
            transaction["contexts"]["trace"]["status"],
        )
    assert refusals == {"10": ("NOMAD_OVERLOAD", "internal_error"), "99": ("status 404", "not_found")}


async def test_file_copies_and_downloads_continue_the_trace(
    captured: CapturingTransport, harness: Harness
) -> None:
    await harness.environment(10)
    runner = await claim(harness, {})
    patch = {"copy": [{"path": "main.py", "content": base64.b64encode(CONTENT.encode()).decode()}]}
    response = await harness.http.patch(f"/runners/{runner}/files", json=patch, headers=trace_headers())
    assert response.status_code == 204
    raw = await harness.http.get(
        f"/runners/{runner}/files/raw", params={"path": "main.py"}, headers=trace_headers()
    )
    assert raw.text == CONTENT
    copy = await captured.wait_for(harness, "PATCH /api/v1/runners/{runner_id}/files")
    download = await captured.wait_for(harness, "GET /api/v1/runners/{runner_id}/files/raw")
    for transaction, op in ((copy, "api.fs.update"), (download, "api.fs.read")):
        assert continued(transaction)
        assert op in span_ops(transaction)
        assert transaction["tags"]["environment_id"] == "10"
        assert transaction["tags"]["outcome"] == "ok"
    assert "http.client" in span_ops(copy), "the copy's call to Nomad is a span of its own"
    assert_nothing_secret(captured)


async def test_an_execution_continues_the_trace(captured: CapturingTransport, harness: Harness) -> None:
    await harness.environment(10)
    runner = await claim(harness, {})
    response = await harness.http.post(
        f"/runners/{runner}/execute", json={"command": "echo traced"}, headers=trace_headers()
    )
    assert response.status_code == 200
    url = response.json()["websocketUrl"]
    extra = [(k.encode(), v.encode()) for k, v in [*trace_headers().items(), ("Poseidon-Token", TOKEN)]]
    messages = []
    async with trio_websocket.open_websocket_url(url, extra_headers=extra) as ws:
        try:
            while True:
                messages.append(json.loads(await ws.get_message()))
        except trio_websocket.ConnectionClosed:
            pass
    assert output(messages) == "traced\r\n"  # on a TTY, as Poseidon runs them
    stored = await captured.wait_for(harness, "POST /api/v1/runners/{runner_id}/execute")
    assert continued(stored)
    assert "api.runner.exec" in span_ops(stored)
    run = await captured.wait_for(harness, "GET /api/v1/runners/{runner_id}/websocket")
    assert continued(run)
    assert run["contexts"]["trace"]["op"] == "websocket.server"
    spans = {span["op"]: span for span in run["spans"]}
    assert spans["nomad.execute.tty"]["parent_span_id"] == spans["api.runner.connect"]["span_id"]
    assert run["tags"]["environment_id"] == "10"
    assert run["tags"]["outcome"] == "ok"
    assert_nothing_secret(captured)


async def test_the_callers_sample_decision_stands(captured: CapturingTransport, harness: Harness) -> None:
    await harness.environment(10, prewarmingPoolSize=3)
    await claim(harness, trace_headers("-0"))  # the caller did not sample it: neither do we
    await harness.wait_for(lambda: captured.unsampled == 1)
    await claim(harness, {})  # no header: a trace of our own, sampled at our rate (1)
    own = await captured.wait_for(harness, "POST /api/v1/runners")
    assert own["contexts"]["trace"]["trace_id"] != TRACE_ID
    assert own["contexts"]["trace"].get("parent_span_id") is None
    assert captured.unsampled == 1


@pytest.mark.parametrize("sample_rate", [0.5])
async def test_the_baggages_sample_random_decides(captured: CapturingTransport, harness: Harness) -> None:
    """Without a decision in ``sentry-trace``, the caller's ``sample_rand`` in the baggage is held
    against our rate, so that every service of the trace decides alike."""
    await harness.environment(10, prewarmingPoolSize=2)
    # The environment's PUT came without a header: sampled at our rate, by chance.
    await harness.wait_for(lambda: bool(captured.transactions) or captured.unsampled == 1)
    unsampled = captured.unsampled
    baggage = {"trace_id": TRACE_ID, "sample_rate": "0.5"}
    await claim(harness, trace_headers("", sample_rand="0.75", **baggage))
    await harness.wait_for(lambda: captured.unsampled == unsampled + 1)
    assert captured.named("POST /api/v1/runners") == []
    await claim(harness, trace_headers("", sample_rand="0.25", **baggage))
    assert continued(await captured.wait_for(harness, "POST /api/v1/runners"))
    assert captured.unsampled == unsampled + 1


@pytest.mark.parametrize("sample_rate", [0.0])
async def test_rate_zero_traces_nothing(captured: CapturingTransport, harness: Harness) -> None:
    assert not tracing_enabled()
    # Nor does sentry-sdk's own Starlette integration, which would attach headers and bodies.
    assert sentry_sdk.get_client().get_integration(StarletteIntegration) is None
    await harness.environment(10)
    await claim(harness, trace_headers())
    sentry_sdk.flush()
    assert captured.transactions == []
    assert captured.unsampled == 0, "no transaction was even started"
