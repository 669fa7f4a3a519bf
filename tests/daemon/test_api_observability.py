"""/api/v1/health/details and /metrics."""

from __future__ import annotations

import httpx

from supervisor.base.levels import StreamState

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


async def test_metrics_in_prometheus_text(harness: Harness) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    base = str(harness.http.base_url).rstrip("/").removesuffix("/api/v1")
    async with httpx.AsyncClient() as http:
        response = await http.get(base + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    assert "supervisor_event_stream_up 1" in lines
    assert 'supervisor_runners{environment="10",state="idle"} 2' in lines
    assert "# TYPE supervisor_executions_total counter" in lines
    assert "supervisor_runners_suspect 0" in lines
    assert "supervisor_nodes_avoided 0" in lines
    assert 'supervisor_runners_found_gone_total{path="exec refusal"} 0' in lines
    samples = [line for line in lines if not line.startswith("#")]
    assert all(len(line.rsplit(" ", 1)) == 2 for line in samples)


async def test_metrics_time_each_runner_start_and_count_the_starting(harness: Harness) -> None:
    await harness.environment(10)
    await harness.wait_for(lambda: harness.idle(10) == 2)
    base = str(harness.http.base_url).rstrip("/").removesuffix("/api/v1")
    async with httpx.AsyncClient() as http:
        lines = (await http.get(base + "/metrics")).text.splitlines()
    assert "# TYPE supervisor_runner_start_seconds histogram" in lines
    assert "supervisor_runner_start_seconds_count 2" in lines, "both runners of the pool started"
    assert 'supervisor_runner_start_seconds_bucket{le="+Inf"} 2' in lines
    buckets = [int(line.rsplit(" ", 1)[1]) for line in lines if "start_seconds_bucket" in line]
    assert buckets == sorted(buckets), "cumulative"
    assert "supervisor_factory_starting 0" in lines, "none is starting any more"
