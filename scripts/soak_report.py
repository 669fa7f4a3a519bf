"""The chaos soak's verdict: runner jobs leaked, each fault's recovery, the drift of the daemon's
resources, every invariant printed, and the report and picture when asked."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scenarios"))
from picture import draw_soak
from soak_faults import AGENT_DOWNTIME, BLIND_WINDOW, FAULTS, HEARTBEAT_GRACE
from soak_figures import (
    RECOVERY_WITHIN,
    by_kind,
    drift,
    execution_rates,
    outages,
    outside_outages,
    recovery_time,
    refill,
)
from soak_record import ENVIRONMENTS, POOL, Soak

from supervisor.simulator import SimConfig, SimulatedCluster


async def leaks(cluster: SimulatedCluster, http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
    """Runner jobs in Nomad beyond the pools, once every claim is given back; and, when there are
    any, what Nomad and the daemon say of each environment's runners."""

    def runner_jobs() -> list[str]:
        return sorted(
            j for (_, j), job in cluster.state.jobs.items() if j[:3] in ("10-", "11-", "12-") and not job.stop
        )

    with trio.move_on_after(60):
        while len(runner_jobs()) != POOL * len(ENVIRONMENTS):
            await cluster.wait_for_write()
    extra = len(runner_jobs()) - POOL * len(ENVIRONMENTS)
    if not extra:
        return 0, {}
    jobs = {
        job_id: [
            f"{a.id[:8]} {a.client_status}/{a.desired_status} on {a.node_name}"
            for a in cluster.state.allocs_by_job.get(("default", job_id), {}).values()
        ]
        for job_id in runner_jobs()
    }
    statistics = (await http.get("/statistics/execution-environments")).json()
    return extra, {"jobs": jobs, "statistics": statistics}


def report(soak: Soak, leaked: int, leak: dict[str, Any], args: argparse.Namespace, logs: Path) -> bool:
    samples = soak.samples
    unrecovered = []
    times: list[float | None] = []
    stretches = outages(soak.faults, AGENT_DOWNTIME + SimConfig().agent_ready_delay)
    beside: list[float] = []  # each fault's slowest pool, less the time no agent could start one
    marks: list[dict[str, Any]] = []
    # (t, the environments whose pool is at strength) at each look.
    strength = [(t, frozenset(e for e, count in idle.items() if count >= POOL)) for t, idle in soak.looks]
    for fault in soak.faults:
        # A node that goes down does so for Nomad only after the heartbeat grace: then it is replaced.
        hits = fault["t"] + (HEARTBEAT_GRACE if fault["kind"] == "node_down" else 0)
        # Each pool on its own: under load each is short for the moment a claim's replacement
        # takes to start, so three at once is a coincidence of the load, not a recovery.
        recovery = {e: recovery_time(e, hits, strength) for e in ENVIRONMENTS}
        fault["recovery_s"] = {e: None if t is None else round(t, 3) for e, t in recovery.items()}
        times += [t for t in recovery.values() if t != 0.0]
        slowest = max(math.inf if t is None else t for t in recovery.values())
        beside.append(outside_outages(hits, slowest, stretches))
        short = [e for e, t in recovery.items() if t is None or t > RECOVERY_WITHIN]
        # For the picture: when the fault's 10 s began, and whether a pool was short after them.
        marks.append({"t": fault["t"], "kind": fault["kind"], "from": hits, "short": bool(short)})
        if short:
            looks = sum(hits < t <= hits + RECOVERY_WITHIN for t, _ in strength)
            unrecovered.append({**fault, "pools_short": short, "looks": looks})
    refill(soak.samples, soak.load_ended, soak.start_seconds, soak.max_starting)
    by_kind(soak.faults, BLIND_WINDOW)
    back = sorted(t for t in times if t is not None)
    if back:
        print(
            f"  pools hit by a fault: {len(times)}, back to strength after a median "
            f"{back[len(back) // 2]:.1f} s, 90% within {back[int(len(back) * 0.9)]:.1f} s, "
            f"the slowest {back[-1]:.1f} s; never back: {len(times) - len(back)}"
        )
    if beside:
        print(
            "  for comparison, less the seconds in which every agent was restarting (no agent could "
            f"start a runner): the slowest {max(beside):.1f} s, "
            f"{sum(t > RECOVERY_WITHIN for t in beside)} faults with a pool short after 10 s"
        )
    checks: dict[str, tuple[bool, float]] = {
        name: (not found, len(found)) for name, found in soak.violations.items()
    }
    idle_by_environment = {str(e): [(t, idle[e]) for t, idle in soak.looks] for e in ENVIRONMENTS}
    checks["leaked_runner_jobs"] = (leaked == 0, leaked)
    checks["pools_at_strength_within_10_s"] = (not unrecovered, len(unrecovered))
    for key in ("tasks", "fds", "rss_kib"):
        load = ("used", "fds_in_flight") if key == "fds" else ("used",)
        change = drift(samples, key, 120, soak.load_ended, load=load)
        checks[f"{key}_drift_under_10_percent"] = (abs(change) < 0.1, round(change, 3))
        median = drift(samples, key, 120, soak.load_ended, robust=True, load=load)
        print(f"  {key} drift, median regression (for comparison): {median:+.3f}")
    stops = drift(samples, "tasks", 120, soak.load_ended, load=("used", "stops_waiting"))
    print(f"  tasks drift at equal runners in use and stops waiting (for comparison): {stops:+.3f}")
    idle = [s for s in samples if s["t"] > soak.load_ended and s["used"] == 0]
    if samples and samples[0]["used"] == 0 and idle:  # both idle: what the load left behind
        print(
            "  idle before the load and after it: "
            + ", ".join(f"{k} {samples[0][k]} -> {idle[-1][k]}" for k in ("tasks", "fds", "rss_kib"))
        )
    print(f"soak: {args.minutes} min, {len(soak.lives)} executions, {len(soak.faults)} faults")
    print(f"  {soak.retries} retries (410 or 500 on a claim or call)")
    print(f"  {soak.client_errors} client transport errors (a kept-alive connection closed)")
    print(f"  {soak.shed} executions not started: 100 clients were busy")
    outcomes: dict[str, int] = {}
    for life in soak.lives:
        outcomes[life["outcome"]] = outcomes.get(life["outcome"], 0) + 1
    kinds: dict[str, int] = {}
    for fault in soak.faults:
        kinds[fault["kind"]] = kinds.get(fault["kind"], 0) + 1
    print(f"  outcomes {outcomes}; faults {kinds}; daemon log {logs / 'daemon.log'}")
    for name, (ok, value) in checks.items():
        print(f"  {name:<36} {'PASS' if ok else 'FAIL'}  {value}")
    invariants = {name: {"ok": ok, "value": value, "limit": 0} for name, (ok, value) in checks.items()}
    if args.report:
        document = {
            "scenario": "soak",
            "seed": args.seed,
            "ok": all(ok for ok, _ in checks.values()),
            "invariants": invariants,
            "faults": soak.faults,
            "outcomes": outcomes,
            "violations": soak.violations,
            "errors": soak.errors,
            "leak": leak,
            "unrecovered": unrecovered,
            "samples": samples,
            # Every look at the pools: (t, the environments whole then), to judge them again.
            "strength": [(t, sorted(whole)) for t, whole in strength],
            # Each environment's idle runners at the same looks: (t, count).
            "idle": idle_by_environment,
        }
        args.report.write_text(json.dumps(document, indent=2) + "\n")
    if args.plot:
        draw_soak(
            args.plot,
            title=f"soak, {args.minutes} min (seed {args.seed})",
            samples=samples,
            pools=idle_by_environment,
            strength=POOL,
            faults=marks,
            kinds=FAULTS,
            rates=execution_rates(soak.lives),
            invariants=invariants,
        )
    return all(ok for ok, _ in checks.values())
