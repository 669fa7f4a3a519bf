"""/api/v1/health/details and /metrics: Prometheus' conventions, the role, the HTTP requests."""

from __future__ import annotations

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from supervisor.base.levels import StreamState
from supervisor.core.config import ServerSettings, Settings
from supervisor.ops.probe import probe
from supervisor.tree.daemon import Daemon

from ..test_observability import convention_violations, role_of, sample_values
from .conftest import Harness


async def test_details_name_every_check(harness: Harness) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    runner = await harness.runner(10)
    await harness.execute(runner, command="true")
    details = (await harness.http.get("/health/details")).json()
    checks = details["checks"]
    assert set(checks) == {
        "event_stream",
        "nomad",
        "draining_nodes",
        "away_nodes",
        "pools",
        "executions",
        "runners",
        "exec_paths",
        "faults",
    }
    assert checks["faults"] == {"status": "ok", "faults": []}
    assert checks["event_stream"]["down_seconds"] == 0
    assert checks["runners"] == {"status": "ok", "suspect": 0, "suspect_ids": [], "found_gone": {}}
    assert checks["away_nodes"] == {"status": "ok", "nodes": []}
    assert checks["event_stream"]["state"] == "up"
    assert checks["event_stream"]["last_index"] > 0
    assert checks["nomad"]["status"] == "ok"
    assert checks["nomad"]["simulated"] is False, "NOMAD_ADDR names the cluster: not the embedded one"
    assert checks["pools"]["environments"]["10"]["usedRunners"] == 1
    assert checks["executions"]["ended"]["exit"] == 1
    assert details["status"] in ("ok", "warning")


async def test_details_report_draining_nodes_and_a_down_stream(harness: Harness) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    claimed = await harness.runner(10)
    node = harness.cluster.state.nodes[harness.service.pool.runners[claimed].node_id]
    # A used runner's batch allocation keeps the node draining until the deadline.
    await harness.nomad.drain_node(node.id, deadline=3600)
    await harness.wait_for(lambda: harness.service.pool.nodes.draining(node.id))
    harness.service.gate.report(StreamState.DOWN)
    details = (await harness.http.get("/health/details")).json()
    assert details["status"] == "warning", "down only briefly: recovering is a warning"
    assert details["checks"]["event_stream"]["status"] == "warning"
    assert details["checks"]["draining_nodes"] == {"status": "warning", "nodes": [node.name]}


async def _metrics(harness: Harness) -> str:
    base = str(harness.http.base_url).rstrip("/").removesuffix("/api/v1")
    async with httpx.AsyncClient() as http:
        response = await http.get(base + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.text


async def test_metrics_in_prometheus_text_by_its_conventions(harness: Harness) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    text = await _metrics(harness)
    assert convention_violations(text) == []
    families = {family.name: family.type for family in text_string_to_metric_families(text)}
    assert families["supervisor_executions"] == "counter"
    assert {"process_cpu_seconds", "python_info", "supervisor_build_info"} <= families.keys()
    assert role_of(text) == "active"
    assert sample_values(text, "supervisor_event_stream_up") == {(): 1}
    assert sample_values(text, "supervisor_nomad_simulated") == {(): 0}
    runners = sample_values(text, "supervisor_runners")
    assert runners[("environment", "10"), ("state", "idle")] == 2
    assert sample_values(text, "supervisor_runners_target") == {(("environment", "10"),): 2}
    assert sample_values(text, "supervisor_runners_suspect") == {(): 0}
    assert sample_values(text, "supervisor_nodes_avoided") == {(): 0}
    found_gone = sample_values(text, "supervisor_runners_found_gone_total")
    assert found_gone[(("path", "exec_refusal"),)] == 0
    assert found_gone.keys() == {(("path", p),) for p in ("event", "listing", "node_restart", "exec_refusal")}
    outcomes = sample_values(text, "supervisor_executions_total")
    assert outcomes.keys() == {
        (("environment", "10"), ("outcome", o)) for o in ("exit", "timeout", "error", "closed")
    }


async def test_http_requests_are_counted_by_route_template(harness: Harness) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    runner = await harness.runner(10)
    assert (await harness.http.delete(f"/runners/{runner}")).status_code == 204
    assert (await harness.http.get("/runners/10-no-such-runner/files")).status_code == 410
    text = await _metrics(harness)
    requests = sample_values(text, "supervisor_http_requests_total")
    released = (("method", "DELETE"), ("route", "/api/v1/runners/{runner_id}"), ("status", "204"))
    assert requests[released] == 1
    gone = (("method", "GET"), ("route", "/api/v1/runners/{runner_id}/files"), ("status", "410"))
    assert requests[gone] == 1
    assert not [labels for labels in requests if runner in str(labels) or "no-such" in str(labels)]
    durations = sample_values(text, "supervisor_http_request_duration_seconds_count")
    assert durations[released[:2]] == 1


async def test_metrics_time_each_runner_start_and_count_the_starting(harness: Harness) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    text = await _metrics(harness)
    families = {family.name: family.type for family in text_string_to_metric_families(text)}
    assert families["supervisor_runner_start_seconds"] == "histogram"
    count = sample_values(text, "supervisor_runner_start_seconds_count")
    assert count == {(): 2}, "both runners of the pool started"
    buckets = sample_values(text, "supervisor_runner_start_seconds_bucket")
    assert buckets[(("le", "+Inf"),)] == 2
    cumulative = [value for _, value in sorted(buckets.items(), key=lambda item: float(item[0][0][1]))]
    assert cumulative == sorted(cumulative), "cumulative"
    assert sample_values(text, "supervisor_factory_starting") == {(): 0}, "none is starting any more"


async def test_the_embedded_cluster_says_so_in_the_details_the_probe_and_metrics(
    nursery: trio.Nursery,
) -> None:
    daemon = Daemon(Settings(server=ServerSettings(port=0)), environ={})
    await nursery.start(daemon.run)
    assert daemon.cluster is not None, "no Nomad address: the embedded cluster"
    base = daemon.addresses[0]
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        details = (await http.get("/api/v1/health/details")).json()
        metrics = (await http.get("/metrics")).text
    assert details["checks"]["nomad"]["simulated"] is True
    assert details["checks"]["nomad"]["status"] == "ok", "it works: the field says what it is"
    assert sample_values(metrics, "supervisor_nomad_simulated") == {(): 1}
    code, line = await trio.to_thread.run_sync(lambda: probe(base, token="", timeout=5, as_json=False))
    assert code == 0
    assert "Nomad is the embedded simulated cluster (for development only)" in line
    daemon.stop()
