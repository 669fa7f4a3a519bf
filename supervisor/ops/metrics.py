"""One daemon's ``/metrics``: a Prometheus registry of its own, read at scrape time.

Every daemon has its own ``CollectorRegistry`` (never the library's global one, so that many
daemons share a process, as in the tests), with prometheus_client's standard collectors
(``process_*``, ``python_*``) and one collector of ours whose figures are read from the daemon's
objects when Prometheus scrapes: no background thread, and no figure kept twice. What it shows in
either role: the build, whether Nomad is the embedded simulated cluster, the role, the trio tasks and
the API's HTTP requests; while active, the
term's runner service too (``metrics_service``).
"""

from __future__ import annotations

import enum
import math
import platform
from collections.abc import Callable, Iterator
from typing import Final, final

import trio
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics import Histogram as _LibraryHistogram
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from .. import __version__
from ..base.histogram import Histogram
from ..desk.service import RunnerService
from .metrics_service import runner_service_metrics

__all__ = ["CONTENT_TYPE", "UNMATCHED", "DaemonMetrics", "Role"]

# The text format ``generate_latest`` writes.
CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
# The route of a request no route took (a 404, a standby's refusal): never the raw path, whose
# IDs would make a series per request.
UNMATCHED: Final = "unmatched"
# The methods counted by name; any other is ``other``, so that a client cannot add series at will.
_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# prometheus_client's default buckets, its +Inf implied.
_REQUEST_BOUNDS: Final = tuple(b for b in _LibraryHistogram.DEFAULT_BUCKETS if not math.isinf(b))


@final
class Role(enum.Enum):
    """What the daemon's API does: serve a term (active), or refuse all but ``/metrics`` (standby)."""

    ACTIVE = "active"
    STANDBY = "standby"


class DaemonMetrics:
    """The daemon's registry and what it counts itself (the API's requests); the runner service's
    figures come from ``active_service()``, the term's service while this daemon is active (None
    while it stands by)."""

    def __init__(
        self,
        active_service: Callable[[], RunnerService | None],
        *,
        simulated: Callable[[], bool] = lambda: False,
    ) -> None:
        self._active_service = active_service
        # Whether the Nomad the daemon speaks to is its embedded simulated cluster.
        self.simulated = simulated
        self._requests: dict[tuple[str, str, str], int] = {}
        self._durations: dict[tuple[str, str], Histogram] = {}
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.registry.register(self)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered HTTP request: its method, its route's template (or ``UNMATCHED``),
        its status, and how long it took."""
        method = method if method in _METHODS else "other"
        key = (method, route, str(status))
        self._requests[key] = self._requests.get(key, 0) + 1
        histogram = self._durations.get((method, route))
        if histogram is None:
            histogram = self._durations[method, route] = Histogram(_REQUEST_BOUNDS)
        histogram.observe(seconds)

    def exposition(self) -> bytes:
        """Every metric of the registry, in Prometheus' text format (``CONTENT_TYPE``)."""
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """The registry's call at each scrape: our figures as they are now."""
        yield InfoMetricFamily(
            "supervisor_build",
            "The daemon's version, and those of Python and trio it runs on.",
            value={"version": __version__, "python": platform.python_version(), "trio": trio.__version__},
        )
        yield GaugeMetricFamily(
            "supervisor_nomad_simulated",
            "1 while the daemon runs on its embedded simulated cluster, whose exec runs local processes; "
            "0 on Nomad.",
            value=float(self.simulated()),
        )
        service = self._active_service()
        role = GaugeMetricFamily(
            "supervisor_role",
            "1 for the daemon's role (active or standby), 0 for the other.",
            labels=["role"],
        )
        active = service is not None
        role.add_metric([Role.ACTIVE.value], float(active))
        role.add_metric([Role.STANDBY.value], float(not active))
        yield role
        yield GaugeMetricFamily(
            "supervisor_trio_tasks",
            "Tasks alive in the daemon's trio run (a leak shows as growth).",
            value=_task_count(),
        )
        yield from self._http_metrics()
        if service is not None:
            yield from runner_service_metrics(service)

    def _http_metrics(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "supervisor_http_requests_total",
            "HTTP requests the API answered, by method, route template and status.",
            labels=["method", "route", "status"],
        )
        for (method, route, status), count in sorted(self._requests.items()):
            requests.add_metric([method, route, status], count)
        yield requests
        durations = HistogramMetricFamily(
            "supervisor_http_request_duration_seconds",
            "Time from an HTTP request's arrival to its answer's last byte, by method and route template.",
            labels=["method", "route"],
        )
        for (method, route), histogram in sorted(self._durations.items()):
            durations.add_metric([method, route], histogram.cumulative(), histogram.total)
        yield durations


def _task_count() -> int:
    """Every task of the current trio run, from its root down through the nurseries."""
    root = trio.lowlevel.current_root_task()
    count, pending = 0, [root] if root is not None else []
    while pending:
        task = pending.pop()
        count += 1
        pending.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return count
