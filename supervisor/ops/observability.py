"""What the daemon tells about itself: ``/api/v1/health/details``, systemd's status line, and the
pools' statistics as Poseidon's API writes them; ``/metrics`` is ``metrics``'s."""

from __future__ import annotations

from typing import Any, Final

import trio

from ..base.errors import SupervisorError
from ..base.levels import StreamState
from ..core.config import Settings
from ..core.pool_view import PoolView
from ..core.runners import PoolStats
from ..desk.executions import ExecutionService
from ..desk.service import RunnerService
from ..informer.admission import AdmissionGate
from ..informer.informer import Informer
from ..nomad.api import NomadApi

__all__ = ["health_details", "pool_statistics", "status_line"]

# Pools named one by one in a status line; past that, counted.
_POOLS_NAMED: Final = 5


def _parts(service: RunnerService) -> tuple[AdmissionGate, Informer, NomadApi, PoolView, ExecutionService]:
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


async def health_details(
    service: RunnerService, settings: Settings, *, simulated: bool = False
) -> dict[str, Any]:
    """``{"status": "ok"|"warning"|"critical", "checks": {...}}``; each check has its own status.
    ``checks.nomad.simulated`` says whether Nomad is the embedded simulated cluster."""
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
    nomad: dict[str, Any] = {"status": "ok", "address": client.address, "simulated": simulated}
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
        "found_gone": pool.found_gone_counts(),
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
