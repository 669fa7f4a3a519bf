"""A scrape of ``/metrics`` costs what the environments and the labels' fixed values cost, never the
runners: the same samples with a thousand runners as with ten thousand, and the work's figures read
in one pass over a few small dicts.

Rules of these tests: they run in trio (pytest-trio's ``trio_mode``) with no I/O: the runner service
stands on a Nomad double, its pool filled through its one entry with the facts an event stream
would bring.
"""

from __future__ import annotations

import trio
from prometheus_client.parser import text_string_to_metric_families

from supervisor.core.config import Settings
from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.evidence import AllocationSeen, JobRegistered
from supervisor.core.orders import SetEnvironment
from supervisor.desk.service import RunnerService
from supervisor.nomad import Allocation
from supervisor.ops.metrics import DaemonMetrics

from .nomad_double import NomadDouble

ENVIRONMENTS = 10
# The families of the work per environment, and of Nomad's events.
WORK_FAMILIES = frozenset(
    {
        "supervisor_executions",
        "supervisor_execution_duration_seconds",
        "supervisor_claims",
        "supervisor_claim_duration_seconds",
        "supervisor_file_transfer_bytes",
        "supervisor_file_transfers",
        "supervisor_nomad_events",
    }
)


def running_service(nursery: trio.Nursery, runners_each: int) -> RunnerService:
    """A runner service with ENVIRONMENTS environments of ``runners_each`` idle runners, and work
    counted in each of them."""
    service = RunnerService(NomadDouble(), Settings(), execution_nursery=nursery)
    for environment_id in range(1, ENVIRONMENTS + 1):
        environment = ExecutionEnvironment(environment_id, "python:3.12", runners_each, 100.0, 256, False, ())
        service.effects.tell(SetEnvironment(environment))
    for i, runner_id in enumerate(list(service.pool.runners)):
        service.effects.tell(JobRegistered(runner_id, 5))
        alloc = Allocation(
            id=f"a{i}", job_id=runner_id, client_status="running", create_index=6, modify_index=6
        )
        service.effects.tell(AllocationSeen(alloc))
    figures = service.figures
    for label in map(str, range(1, ENVIRONMENTS + 1)):
        figures.claims.add(label, "claimed", 3)
        figures.claim_seconds.observe(label, 0.02)
        figures.executions.add(label, "exit", 5)
        figures.execution_seconds.observe(label, 1.5)
        figures.transfers.add(label, "upload")
        figures.transfer_bytes.add(label, "upload", 1000)
    return service


def work_samples(metrics: DaemonMetrics) -> dict[str, int]:
    """The samples of each work family in one scrape."""
    text = metrics.exposition().decode()
    return {
        family.name: len(family.samples)
        for family in text_string_to_metric_families(text)
        if family.name in WORK_FAMILIES
    }


async def test_a_scrape_writes_as_many_samples_for_ten_thousand_runners_as_for_a_thousand() -> None:
    async with trio.open_nursery() as nursery:
        small = running_service(nursery, 100)
        large = running_service(nursery, 1000)
        assert sum(s.idle for s in large.pool.stats().values()) == 10_000
        samples = work_samples(DaemonMetrics(lambda: small))
        assert samples == work_samples(DaemonMetrics(lambda: large))
        nursery.cancel_scope.cancel("test over")
    histogram = 2 + len(large.figures.execution_seconds.bounds) + 1  # sum, count, the buckets and +Inf
    assert samples["supervisor_execution_duration_seconds"] == ENVIRONMENTS * histogram
    assert samples["supervisor_claims"] == ENVIRONMENTS * 5 + 1, "each outcome, and the unknown one"
    assert samples["supervisor_file_transfers"] == ENVIRONMENTS * 2


async def test_a_deleted_environments_counts_are_shown_under_unknown() -> None:
    # Environments made and deleted one after another must not grow the scrape: what was counted in
    # one the pool no longer knows is folded into ``unknown``, and no count is lost.
    async with trio.open_nursery() as nursery:
        service = running_service(nursery, 1)
        figures = service.figures
        metrics = DaemonMetrics(lambda: service)
        samples = []
        for deleted in (range(100, 140), range(200, 600)):
            for gone in map(str, deleted):
                figures.claims.add(gone, "claimed", 2)
                figures.claim_seconds.observe(gone, 0.02)
                figures.executions.add(gone, "exit")
            samples.append(work_samples(metrics))
        assert samples[0] == samples[1]
        families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
        claims = {
            (s.labels["environment"], s.labels["outcome"]): s.value
            for s in families["supervisor_claims"].samples
            if s.name == "supervisor_claims_total"
        }
        assert claims[("unknown", "claimed")] == 2 * 440
        assert claims[("1", "claimed")] == 3
        assert not any(environment == "100" for environment, _ in claims)
        unknown_durations = next(
            s.value
            for s in families["supervisor_claim_duration_seconds"].samples
            if s.name.endswith("_count") and s.labels["environment"] == "unknown"
        )
        assert unknown_durations == 440
        nursery.cancel_scope.cancel()
