"""The active term's figures for ``/metrics``: the event stream, the pools, the executions, Nomad's
exec sessions and the factory, read from the runner service at scrape time; the work per
environment and Nomad's events from ``metrics_work``.

A scrape walks the runners twice (their counts by state, the suspect ones) and writes nothing per
runner, so that it stays cheap with ten thousand runners. Label values are identifiers
(``node_restart``, never ``node restart``): ``identifier`` turns the words our objects count by
into one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from ..base.faults import FaultKind
from ..base.levels import StreamState
from ..core.runners import FOUND_BY, RunnerState
from ..desk.service import RunnerService
from ..effects.factory import START_PATIENCE
from .metrics_work import work_metrics

__all__ = ["identifier", "runner_service_metrics"]

_NOT_IDENTIFIER: Final = re.compile(r"[^a-z0-9]+")


def identifier(words: str) -> str:
    """``words`` as a label value: lower case, each run of other characters one underscore."""
    return _NOT_IDENTIFIER.sub("_", words.lower()).strip("_")


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def _counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, help_text, value=value)


def _by(
    family: type[GaugeMetricFamily | CounterMetricFamily],
    name: str,
    help_text: str,
    label: str,
    values: Iterable[tuple[str, float]],
) -> Metric:
    """One family with one label: a sample per ``(label value, value)``."""
    metric = family(name, help_text, labels=[label])
    for label_value, value in values:
        metric.add_metric([label_value], value)
    return metric


def _counts(counted: Mapping[str, int], names: Iterable[str] = ()) -> list[tuple[str, float]]:
    """``counted`` by identifier, each of ``names`` among them (at 0 until counted)."""
    values = dict.fromkeys(map(identifier, names), 0.0)
    for words, count in counted.items():
        values[identifier(words)] = values.get(identifier(words), 0.0) + count
    return sorted(values.items())


def runner_service_metrics(service: RunnerService) -> Iterator[Metric]:
    """Every family of the runner service, as it is now."""
    now = trio.current_time()
    yield from _stream_metrics(service, now)
    yield from _pool_metrics(service, now)
    yield from _execution_metrics(service)
    yield from _factory_metrics(service)
    yield from work_metrics(service)


def _stream_metrics(service: RunnerService, now: float) -> Iterator[Metric]:
    gate = service.gate
    yield _gauge(
        "supervisor_event_stream_up",
        "1 while the Nomad event stream is followed.",
        1.0 if gate.state is StreamState.UP else 0.0,
    )
    yield _gauge(
        "supervisor_event_stream_down_seconds",
        "Seconds since the event stream was last followed (0 while it is), whatever the reconnects.",
        round(gate.down_for(now), 3),
    )
    yield _counter("supervisor_event_stream_losses_total", "Times the event stream was lost.", gate.losses)
    yield _gauge(
        "supervisor_event_stream_last_index",
        "Raft index of the last applied event.",
        service.informer.last_index,
    )
    yield _by(
        GaugeMetricFamily,
        "supervisor_permanent_faults",
        "Faults no retry can mend (a refused token, a refused environment job), by kind; health is "
        "critical while one holds.",
        "kind",
        [(kind.value, service.faults.count(kind)) for kind in FaultKind],
    )


def _pool_metrics(service: RunnerService, now: float) -> Iterator[Metric]:
    pool = service.pool
    counts = pool.runner_counts()
    environments = [(environment.id, environment) for environment in pool.all_environments()]
    runners = GaugeMetricFamily(
        "supervisor_runners", "Runners by environment and state.", labels=["environment", "state"]
    )
    for environment_id, _ in environments:
        for state in RunnerState:
            runners.add_metric([str(environment_id), state.value], counts.get((environment_id, state), 0))
    yield runners
    yield _by(
        GaugeMetricFamily,
        "supervisor_runners_target",
        "Idle runners each environment's pool is kept at (its prewarmingPoolSize), beside "
        'supervisor_runners{state="idle"}.',
        "environment",
        [
            (str(environment_id), environment.prewarming_pool_size)
            for environment_id, environment in environments
        ],
    )
    yield _gauge(
        "supervisor_runners_suspect",
        "Runners whose agent restarted since they were last seen running, not handed out until proven.",
        len(pool.suspect_runners()),
    )
    yield _gauge(
        "supervisor_nodes_avoided",
        "Nodes new runners avoid: an exec could not reach their agent lately.",
        len(pool.avoided_nodes(now)),
    )
    yield _by(
        CounterMetricFamily,
        "supervisor_runners_found_gone_total",
        "Runners found gone, by how: event, listing, node_restart, exec_refusal.",
        "path",
        _counts(pool.found_gone_counts(), FOUND_BY),
    )


def _execution_metrics(service: RunnerService) -> Iterator[Metric]:
    executions, paths = service.executions, service.client.exec_paths
    yield _by(
        CounterMetricFamily,
        "supervisor_exec_sessions_total",
        "Exec sessions (executions, file commands, stops) by who held them: the agent or a server.",
        "path",
        [(path, paths[path]) for path in ("agent", "server")],
    )
    yield _counter(
        "supervisor_exec_agent_fallbacks_total",
        "Exec sessions that went through a server because the allocation's agent could not be reached.",
        paths["fallback"],
    )
    yield _gauge(
        "supervisor_command_stops_waiting",
        "Commands left running by a cut exec session whose stop waits for Nomad to reach them again.",
        service.stops.waiting,
    )
    yield _gauge("supervisor_executions_running", "Executions running now.", executions.running_count)


def _factory_metrics(service: RunnerService) -> Iterator[Metric]:
    factory = service.factory
    yield _counter("supervisor_runner_jobs_created_total", "Runner jobs registered.", factory.created)
    yield _counter("supervisor_runner_jobs_destroyed_total", "Runner jobs purged.", factory.destroyed)
    yield _counter("supervisor_runner_job_failures_total", "Nomad refused a job for good.", factory.failed)
    yield _gauge("supervisor_factory_backlog", "Actions waiting for the factory.", factory.backlog)
    yield _gauge(
        "supervisor_factory_starting",
        "New runner jobs that hold back registrations (factory.max_starting): registered in the "
        f"last {START_PATIENCE:g} s, allocation not running yet, on the agent that starts the most "
        "of them or not placed yet.",
        factory.starting,
    )
    start_seconds = factory.start_seconds
    histogram = HistogramMetricFamily(
        "supervisor_runner_start_seconds", "From a new runner job's registration to its allocation running."
    )
    histogram.add_metric([], start_seconds.cumulative(), start_seconds.total)
    yield histogram
