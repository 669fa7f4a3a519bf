"""The families of the work the API was asked for, per environment, and of the events read from
Nomad: what Poseidon's operators read from its InfluxDB measurements, in Prometheus' terms.

The figures are the desk's (``desk/figures.py``) and the client's (``nomad/events.py``), read at
scrape time. Every environment the pool knows shows each of its series from the start, at 0 until
counted, so that a rate or an alert on a series works before its first event. The counts of an
environment the pool no longer knows (deleted) are shown under ``unknown``: no count goes away, and
creating and deleting environments does not grow the label set. The cost follows the environments
the pool knows and the labels' fixed values, never the runners.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from ..base.histogram import Histogram
from ..desk.figures import (
    CLAIM_OUTCOMES,
    DIRECTIONS,
    EXECUTION_OUTCOMES,
    UNKNOWN_ENVIRONMENT,
    Counts,
    Durations,
)
from ..desk.service import RunnerService

__all__ = ["work_metrics"]


def work_metrics(service: RunnerService) -> Iterator[Metric]:
    """The families of executions, claims, file transfers and Nomad's events."""
    figures = service.figures
    environments = [str(environment.id) for environment in service.pool.all_environments()]
    yield _by_environment(
        "supervisor_executions_total",
        "Ended executions by environment and terminal message: exit, timeout, error (ended by the "
        "supervisor's or Nomad's cause), closed (the client left first).",
        "outcome",
        figures.executions,
        environments,
        EXECUTION_OUTCOMES,
    )
    yield _durations(
        "supervisor_execution_duration_seconds",
        "Time from an execution's start message to its end, by environment.",
        figures.execution_seconds,
        environments,
    )
    yield _by_environment(
        "supervisor_claims_total",
        "Answered POST /api/v1/runners by environment (unknown: one the pool does not know) and "
        "outcome: claimed, no_idle_runner (500 NOMAD_OVERLOAD), unreachable (500 NOMAD_UNREACHABLE), "
        "unknown_environment (404), error.",
        "outcome",
        figures.claims,
        environments,
        CLAIM_OUTCOMES,
        always=[(UNKNOWN_ENVIRONMENT, "unknown_environment")],
    )
    yield _durations(
        "supervisor_claim_duration_seconds",
        "Time from a claim's request to its answer (the wait for the runner's used mark in Nomad "
        "included), by environment, of the claimed ones.",
        figures.claim_seconds,
        environments,
    )
    yield _by_environment(
        "supervisor_file_transfer_bytes_total",
        "Bytes of file contents written by PATCH /runners/{id}/files (upload) and sent by "
        "GET /runners/{id}/files/raw (download), by environment.",
        "direction",
        figures.transfer_bytes,
        environments,
        DIRECTIONS,
    )
    yield _by_environment(
        "supervisor_file_transfers_total",
        "File uploads (PATCH /runners/{id}/files) and downloads (GET /runners/{id}/files/raw) that "
        "succeeded, by environment.",
        "direction",
        figures.transfers,
        environments,
        DIRECTIONS,
    )
    events = CounterMetricFamily(
        "supervisor_nomad_events_total",
        "Events read from Nomad's event stream, by Nomad's topic and type (other: a name outside "
        "Nomad's own).",
        labels=["topic", "type"],
    )
    for (topic, kind), count in service.client.nomad_events.items():
        events.add_metric([topic, kind], count)
    yield events


def _by_environment(
    name: str,
    help_text: str,
    label: str,
    counts: Counts,
    environments: Iterable[str],
    values: Sequence[str],
    *,
    always: Iterable[tuple[str, str]] = (),
) -> Metric:
    """A counter by environment and ``label``: each known environment with each of ``values``, and
    ``always``, at 0 until counted, beside whatever was counted."""
    known = set(environments)
    samples = dict.fromkeys(((e, v) for e in known for v in values), 0)
    samples.update(dict.fromkeys(always, 0))
    for (environment, value), count in counts.items():
        key = (environment if environment in known else UNKNOWN_ENVIRONMENT, value)
        samples[key] = samples.get(key, 0) + count
    family = CounterMetricFamily(name, help_text, labels=["environment", label])
    for labels, count in sorted(samples.items()):
        family.add_metric(list(labels), count)
    return family


def _durations(name: str, help_text: str, durations: Durations, environments: Iterable[str]) -> Metric:
    """A histogram by environment: each known environment's, empty until its first duration; those
    of environments no longer known merged under ``unknown``."""
    histograms = {environment: Histogram(durations.bounds) for environment in environments}
    for environment, histogram in durations.items():
        key = environment if environment in histograms else UNKNOWN_ENVIRONMENT
        earlier = histograms.get(key)
        histograms[key] = histogram if earlier is None else earlier.merged(histogram)
    family = HistogramMetricFamily(name, help_text, labels=["environment"])
    for environment, histogram in sorted(histograms.items()):
        family.add_metric([environment], histogram.cumulative(), histogram.total)
    return family
