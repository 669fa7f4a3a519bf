"""What the daemon tells about itself: ``/api/v1/health/details``, ``/metrics`` (Prometheus text),
and the pools' statistics as Poseidon's API writes them."""

from __future__ import annotations

import math
from typing import Any, Final

import trio

from ..base.errors import SupervisorError
from ..base.faults import FaultKind
from ..base.levels import StreamState
from ..core.config import Settings
from ..core.pool import RunnerPool
from ..core.runners import FOUND_BY, PoolStats, RunnerState
from ..desk.executions import ExecutionService
from ..desk.service import RunnerService
from ..effects.factory import START_PATIENCE
from ..informer.admission import AdmissionGate
from ..informer.informer import Informer
from ..nomad.api import NomadApi

__all__ = ["health_details", "metric_line", "metrics_text", "pool_statistics", "status_line"]

# Pools named one by one in a status line; past that, counted.
_POOLS_NAMED: Final = 5


def _parts(service: RunnerService) -> tuple[AdmissionGate, Informer, NomadApi, RunnerPool, ExecutionService]:
    """The parts of the term a report reads."""
    return service.gate, service.informer, service.client, service.pool, service.executions


def pool_statistics(stats: PoolStats) -> dict[str, int]:
    """Poseidon's ``EnvironmentStatistics`` of one pool: the one place its camelCase is written."""
    return {
        "id": stats.environment_id,
        "prewarmingPoolSize": stats.size,
        "idleRunners": stats.idle,
        "usedRunners": stats.used,
    }


async def health_details(service: RunnerService, settings: Settings) -> dict[str, Any]:
    """``{"status": "ok"|"warning"|"critical", "checks": {...}}``; each check has its own status."""
    now = trio.current_time()
    gate, informer, client, pool, executions = _parts(service)
    stream = gate.state
    down_for = gate.down_for(now)
    checks: dict[str, dict[str, Any]] = {}
    if stream is StreamState.UP:
        stream_status = "ok"
    else:
        stream_status = "critical" if down_for > settings.health.stream_down_grace else "warning"
    checks["event_stream"] = {
        "status": stream_status,
        "state": stream.value,
        "for_seconds": round(now - gate.since, 3),
        "down_seconds": round(down_for, 3),
        "last_index": informer.last_index,
        "losses": gate.losses,
    }
    faults = service.faults.active()
    checks["faults"] = {
        "status": "critical" if faults else "ok",
        "faults": [
            {
                "kind": f.kind.value,
                "subject": f.subject,
                "reason": f.reason,
                "remedy": f.remedy,
                "for_seconds": round(now - f.since, 3),
            }
            for f in faults
        ],
    }
    nomad: dict[str, Any] = {"status": "ok", "address": client.address}
    try:
        timeout = settings.health.nomad_check_timeout
        with trio.fail_after(timeout):
            nomad["leader"] = await client.leader(attempts=1, http_timeout=timeout)
    except (SupervisorError, trio.TooSlowError) as exc:
        nomad.update(status="critical", error=str(exc) or "no answer in time")
    checks["nomad"] = nomad
    draining = pool.draining_node_names()
    checks["draining_nodes"] = {"status": "warning" if draining else "ok", "nodes": draining}
    checks["away_nodes"] = {"status": "ok", "nodes": pool.avoided_node_names(now)}
    suspect = pool.suspect_runners()
    checks["runners"] = {
        "status": "ok",
        "suspect": len(suspect),
        "suspect_ids": suspect[:20],
        "found_gone": dict(pool.found_gone),
    }
    threshold = settings.alert.prewarming_pool_threshold
    stats = pool.stats()
    pools = {str(k): {**pool_statistics(v), "suspectRunners": v.suspect} for k, v in stats.items()}
    depleting = [str(k) for k in pool.depleting(threshold)]
    checks["pools"] = {
        "status": "warning" if depleting else "ok",
        "threshold": threshold,
        "depleting": depleting,
        "environments": pools,
    }
    checks["executions"] = {
        "status": "ok",
        "running": executions.running_count,
        "ended": dict(executions.outcomes),
        "by_path": dict(executions.paths),
    }
    paths = client.exec_paths
    checks["exec_paths"] = {
        "status": "ok",
        "mode": settings.nomad.direct_exec,
        "sessions": {"agent": paths["agent"], "server": paths["server"]},
        "fallbacks": paths["fallback"],
        "unreachable_agents": pool.unreachable_agents(),
    }
    statuses = {check["status"] for check in checks.values()}
    status = "critical" if "critical" in statuses else "warning" if "warning" in statuses else "ok"
    return {"status": status, "checks": checks}


def _number(value: float) -> str:
    """Every digit of a count, however large (``:g`` would write 1234567 as 1.23457e+06), and
    Prometheus' spelling of the values that are not numbers."""
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    return str(int(value)) if number.is_integer() else repr(number)


def metric_line(name: str, value: float, labels: dict[str, str] | None = None) -> str:
    """One sample in Prometheus' text format."""
    if labels:
        rendered = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return f"{name}{{{rendered}}} {_number(value)}"
    return f"{name} {_number(value)}"


def _task_count() -> int:
    """Every task of the current trio run, from its root down through the nurseries."""
    root = trio.lowlevel.current_root_task()
    count, pending = 0, [root] if root is not None else []
    while pending:
        task = pending.pop()
        count += 1
        pending.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return count


def metrics_text(service: RunnerService) -> str:
    """The daemon's state in Prometheus' text exposition format (version 0.0.4)."""
    gate, informer, client, pool, executions = _parts(service)
    lines: list[str] = []

    def metric(
        name: str, kind: str, help_text: str, samples: list[tuple[dict[str, str] | None, float]]
    ) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(metric_line(name, value, labels) for labels, value in samples)

    metric(
        "supervisor_trio_tasks",
        "gauge",
        "Tasks alive in the daemon's trio run (a leak shows as growth).",
        [(None, _task_count())],
    )
    metric(
        "supervisor_event_stream_up",
        "gauge",
        "1 while the Nomad event stream is followed.",
        [(None, 1.0 if gate.state is StreamState.UP else 0.0)],
    )
    metric(
        "supervisor_event_stream_down_seconds",
        "gauge",
        "Seconds since the event stream was last followed (0 while it is), whatever the reconnects.",
        [(None, round(gate.down_for(trio.current_time()), 3))],
    )
    metric(
        "supervisor_permanent_faults",
        "gauge",
        "Faults no retry can mend (a refused token, a refused environment job), by kind; health is "
        "critical while one holds.",
        [({"kind": kind.value}, service.faults.count(kind)) for kind in FaultKind],
    )
    metric(
        "supervisor_event_stream_losses_total",
        "counter",
        "Times the event stream was lost.",
        [(None, gate.losses)],
    )
    metric(
        "supervisor_event_stream_last_index",
        "gauge",
        "Raft index of the last applied event.",
        [(None, informer.last_index)],
    )
    counts = pool.runner_counts()
    samples: list[tuple[dict[str, str] | None, float]] = [
        ({"environment": str(environment_id), "state": state.value}, counts.get((environment_id, state), 0))
        for environment_id in sorted(pool.environment_ids(), key=str)
        for state in RunnerState
    ]
    metric("supervisor_runners", "gauge", "Runners by environment and state.", samples)
    metric(
        "supervisor_runners_suspect",
        "gauge",
        "Runners whose agent restarted since they were last seen running, not handed out until proven.",
        [(None, len(pool.suspect_runners()))],
    )
    metric(
        "supervisor_nodes_avoided",
        "gauge",
        "Nodes new runners avoid: an exec could not reach their agent lately.",
        [(None, len(pool.avoided_nodes(trio.current_time())))],
    )
    metric(
        "supervisor_runners_found_gone_total",
        "counter",
        "Runners found gone, by how: event, listing, node restart, exec refusal.",
        [({"path": path}, pool.found_gone.get(path, 0)) for path in FOUND_BY],
    )
    paths = client.exec_paths
    metric(
        "supervisor_exec_sessions_total",
        "counter",
        "Exec sessions (executions, file commands, stops) by who held them: the agent or a server.",
        [({"path": path}, paths[path]) for path in ("agent", "server")],
    )
    metric(
        "supervisor_exec_agent_fallbacks_total",
        "counter",
        "Exec sessions that went through a server because the allocation's agent could not be reached.",
        [(None, paths["fallback"])],
    )
    metric(
        "supervisor_command_stops_waiting",
        "gauge",
        "Commands left running by a cut exec session whose stop waits for Nomad to reach them again.",
        [(None, service.stops.waiting)],
    )
    metric(
        "supervisor_executions_running",
        "gauge",
        "Executions running now.",
        [(None, executions.running_count)],
    )
    metric(
        "supervisor_executions_total",
        "counter",
        "Ended executions by terminal message.",
        [({"outcome": k}, v) for k, v in sorted(executions.outcomes.items())],
    )
    factory = service.factory
    metric(
        "supervisor_runner_jobs_created_total",
        "counter",
        "Runner jobs registered.",
        [(None, factory.created)],
    )
    metric(
        "supervisor_runner_jobs_destroyed_total",
        "counter",
        "Runner jobs purged.",
        [(None, factory.destroyed)],
    )
    metric(
        "supervisor_runner_job_failures_total",
        "counter",
        "Nomad refused a job for good.",
        [(None, factory.failed)],
    )
    metric(
        "supervisor_factory_backlog", "gauge", "Actions waiting for the factory.", [(None, factory.backlog)]
    )
    metric(
        "supervisor_factory_starting",
        "gauge",
        "New runner jobs that hold back registrations (factory.max_starting): registered in the "
        f"last {START_PATIENCE:g} s, allocation not running yet, on the agent that starts the most "
        "of them or not placed yet.",
        [(None, factory.starting)],
    )
    histogram = factory.start_seconds
    metric(
        "supervisor_runner_start_seconds",
        "histogram",
        "From a new runner job's registration to its allocation running.",
        [],
    )
    name = "supervisor_runner_start_seconds"
    lines.extend(metric_line(f"{name}_bucket", count, {"le": le}) for le, count in histogram.cumulative())
    lines.append(metric_line(f"{name}_sum", histogram.total))
    lines.append(metric_line(f"{name}_count", histogram.count))
    return "\n".join(lines) + "\n"


def status_line(service: RunnerService) -> str:
    """One line of what the daemon is doing, for systemd's ``STATUS=``: the stream, the pools (each
    while there are few, else how many are below strength), the running executions."""
    pool, executions = service.pool, service.executions
    pools = sorted(pool.stats().values(), key=lambda p: p.environment_id)
    if len(pools) <= _POOLS_NAMED:
        fill = ", ".join(f"{p.environment_id}: {p.idle}/{p.size}" for p in pools) or "none"
    else:
        short = sum(p.idle < p.size for p in pools)
        fill = f"{len(pools)} pools, {short} below strength"
    running = executions.running_count
    return f"stream {service.gate.state.value}; idle runners {fill}; {running} executions running"
