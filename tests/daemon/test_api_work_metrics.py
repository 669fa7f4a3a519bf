"""/metrics counts the work the API was asked for, per environment, and the events read from Nomad:
claims by outcome and their time, executions by outcome and their time, file transfers and their
bytes, each driven here by the request a client sends, against the simulated cluster.

The daemon runs on the real clock (``conftest.py``): durations are asserted by their count and their
bounds, never their exact value.
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest
import trio_websocket

from supervisor.base.levels import StreamState
from supervisor.core.config import AdmissionSettings, ServerSettings, Settings

from ..test_observability import Labels, convention_violations, sample_values
from .conftest import Harness

_ENV = (("environment", "10"),)


async def _metrics(harness: Harness) -> str:
    base = str(harness.http.base_url).rstrip("/").removesuffix("/api/v1")
    async with httpx.AsyncClient() as http:
        response = await http.get(base + "/metrics")
    assert response.status_code == 200
    assert convention_violations(response.text) == []
    return response.text


def _by(text: str, name: str, label: str) -> dict[tuple[str, str], float]:
    """The family's samples as ``{(environment, label's value): value}``."""
    return {(dict(k)["environment"], dict(k)[label]): v for k, v in sample_values(text, name).items()}


def _count(text: str, name: str, labels: Labels = _ENV) -> float:
    return sample_values(text, f"{name}_count")[labels]


@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), admission=AdmissionSettings(wait_timeout=0.2))]
)
async def test_claims_are_counted_by_environment_and_outcome(harness: Harness, settings: Settings) -> None:
    await harness.environment(10)
    await harness.environment(20, prewarmingPoolSize=0)
    await harness.runner(10)
    await harness.runner(10)
    overload = await harness.http.post("/runners", json={"executionEnvironmentId": 20})
    assert overload.json()["errorCode"] == "NOMAD_OVERLOAD"
    unknown = await harness.http.post("/runners", json={"executionEnvironmentId": 99})
    assert unknown.status_code == 404
    harness.service.gate.report(StreamState.DOWN)
    unreachable = await harness.http.post("/runners", json={"executionEnvironmentId": 10})
    assert unreachable.json()["errorCode"] == "NOMAD_UNREACHABLE"
    harness.service.gate.report(StreamState.UP)
    text = await _metrics(harness)
    claims = _by(text, "supervisor_claims_total", "outcome")
    assert {key: value for key, value in claims.items() if value} == {
        ("10", "claimed"): 2,
        ("10", "unreachable"): 1,
        ("20", "no_idle_runner"): 1,
        ("unknown", "unknown_environment"): 1,
    }, "99 is no label: a client cannot add series"
    outcomes = ("claimed", "no_idle_runner", "unreachable", "unknown_environment", "error")
    assert {(e, o) for e in ("10", "20") for o in outcomes} <= claims.keys(), "every one at 0 first"
    assert _count(text, "supervisor_claim_duration_seconds") == 2, "only the claimed ones are timed"
    assert _count(text, "supervisor_claim_duration_seconds", (("environment", "20"),)) == 0
    buckets = sample_values(text, "supervisor_claim_duration_seconds_bucket")
    bounds = sorted(float(dict(k)["le"]) for k in buckets if dict(k)["environment"] == "10")
    assert bounds == [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf")]
    assert 0 < sample_values(text, "supervisor_claim_duration_seconds_sum")[_ENV] < 5


async def test_executions_are_counted_and_timed_by_environment_and_outcome(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    assert (await harness.execute(runner, command="exit 3"))[-1] == {"type": "exit", "data": 3}
    assert (await harness.execute(runner, command="sleep 30", timeLimit=1))[-1] == {"type": "timeout"}
    response = await harness.http.post(f"/runners/{runner}/execute", json={"command": "sleep 30"})
    async with trio_websocket.open_websocket_url(response.json()["websocketUrl"]) as ws:
        assert json.loads(await ws.get_message()) == {"type": "start"}
    outcomes = harness.service.figures.executions
    await harness.wait_for(lambda: outcomes.get("10", "closed") == 1)

    async def destroy() -> None:
        assert (await harness.http.delete(f"/runners/{runner}")).status_code == 204

    messages = await harness.run_until_end(runner, "echo go; sleep 60", destroy)
    assert messages[-1]["type"] == "error"
    text = await _metrics(harness)
    executions = _by(text, "supervisor_executions_total", "outcome")
    assert executions == {("10", "exit"): 1, ("10", "timeout"): 1, ("10", "closed"): 1, ("10", "error"): 1}
    assert _count(text, "supervisor_execution_duration_seconds") == 4
    buckets = sample_values(text, "supervisor_execution_duration_seconds_bucket")
    assert buckets[(*_ENV, ("le", "0.5"))] <= 3, "the timeout ran its time limit of 1 s"
    assert buckets[(*_ENV, ("le", "900"))] == 4
    assert 1 <= sample_values(text, "supervisor_execution_duration_seconds_sum")[_ENV] < 30


async def test_file_transfers_count_the_bytes_written_and_sent(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    files = f"/runners/{runner}/files"
    contents = [b"print('hello')\n", bytes(range(256)) * 40, b""]
    copy = [
        {"path": f"f{i}.bin", "content": base64.b64encode(content).decode()}
        for i, content in enumerate(contents)
    ]
    patch = {"delete": ["./*"], "copy": [*copy, {"path": "dir/"}]}
    assert (await harness.http.patch(files, json=patch)).status_code == 204
    downloaded = await harness.http.get(f"{files}/raw", params={"path": "f1.bin"})
    assert downloaded.content == contents[1]
    # A file of /proc says its size is 0: sent without a length, to its end.
    unsized = await harness.http.get(f"{files}/raw", params={"path": "/proc/self/status"})
    assert unsized.status_code == 200
    assert "content-length" not in unsized.headers
    missing = await harness.http.get(f"{files}/raw", params={"path": "nope.bin"})
    assert missing.status_code == 424, "a refused download counts nothing"
    escape = {"copy": [{"path": "../out.txt", "content": "eA=="}]}
    assert (await harness.http.patch(files, json=escape)).status_code == 400
    text = await _metrics(harness)
    assert _by(text, "supervisor_file_transfers_total", "direction") == {
        ("10", "upload"): 1,
        ("10", "download"): 2,
    }
    assert _by(text, "supervisor_file_transfer_bytes_total", "direction") == {
        ("10", "upload"): sum(map(len, contents)),
        ("10", "download"): len(contents[1]) + len(unsized.content),
    }


async def test_a_download_cut_short_counts_what_was_sent_and_no_transfer(harness: Harness) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    size = 20_000_000  # far more than the sockets on the way hold
    made = await harness.execute(runner, command=f"head -c {size} /dev/zero > big.bin")
    assert made[-1] == {"type": "exit", "data": 0}
    async with harness.http.stream("GET", f"/runners/{runner}/files/raw", params={"path": "big.bin"}) as r:
        async for _ in r.aiter_raw():
            break  # the client reads a little, then goes away
    await harness.wait_for(lambda: harness.cluster.execs.count == 0)
    figures = harness.service.figures
    assert figures.transfers.get("10", "download") == 0
    assert 0 < figures.transfer_bytes.get("10", "download") < size


async def test_nomad_events_are_counted_by_topic_and_type(harness: Harness) -> None:
    await harness.environment(10)
    await harness.runner(10)
    text = await _metrics(harness)
    events = {
        (dict(k)["topic"], dict(k)["type"]): v
        for k, v in sample_values(text, "supervisor_nomad_events_total").items()
    }
    later = dict(harness.service.client.nomad_events.items())
    assert all(value <= later[key] for key, value in events.items()), "the client's counts, as they were"
    assert events[("Job", "JobRegistered")] >= 3, "the template job and two runner jobs"
    assert events[("Allocation", "PlanResult")] >= 2, "each runner's allocation placed"
    assert ("Allocation", "AllocationUpdated") in events, "and reported running by its agent"
    assert {topic for topic, _ in events} <= {"Job", "Allocation", "Node", "Evaluation", "Deployment"}
