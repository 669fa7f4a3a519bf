"""The chaos soak's watchers of the daemon, each in a thread of its own: the pools' strength four
times a second, and the daemon's figures and resources about once a second."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import httpx
import trio
from soak_figures import metric
from soak_record import ENVIRONMENTS, Soak

STRENGTH_EVERY: Final = 0.25


def watch_strength(api: str, soak: Soak, stop: threading.Event) -> None:
    """Which pools are at strength, four times a second, from a thread of its own: this process
    also runs the cluster and the load, whose bursts would stretch the looks of a task of its loop
    to seconds apart. A pool under load is below strength for the moment each refill takes, so a
    slow look would miss the moments it is whole."""
    with httpx.Client(base_url=api, timeout=5) as http:
        while not stop.wait(STRENGTH_EVERY):
            try:
                stats = http.get("/statistics/execution-environments").json()
            except (httpx.HTTPError, ValueError):
                continue
            idle = {e: stats.get(str(e), {}).get("idleRunners", 0) for e in ENVIRONMENTS}
            soak.looks.append((soak.now(), idle))


@contextlib.asynccontextmanager
async def watching(soak: Soak, api: str, daemon_pid: int) -> AsyncIterator[None]:
    """``watch_strength`` and ``sample``, each in a thread of its own, for the time of the block;
    one that failed fails the soak once they are stopped, as a task of its loop would."""
    stop = threading.Event()
    metrics_url = api.removesuffix("/api/v1") + "/metrics"
    failed: list[BaseException] = []

    def guarded(watch: Callable[..., None], *args: Any) -> None:
        try:
            watch(*args, stop)
        except BaseException as exc:
            failed.append(exc)

    threads = [
        threading.Thread(target=guarded, args=(watch_strength, api, soak), daemon=True),
        threading.Thread(target=guarded, args=(sample, api, metrics_url, daemon_pid, soak), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        # The first sample before the load: the "idle before" figure.
        await trio.to_thread.run_sync(soak.sampled.wait, 10)
        yield
    finally:
        stop.set()
        with trio.CancelScope(shield=True):
            for thread in threads:
                await trio.to_thread.run_sync(thread.join)
    if failed:
        raise RuntimeError(f"a watcher of the daemon failed: {failed[0]!r}") from failed[0]


def descriptors(pid: int) -> tuple[int, int]:
    """A process's open descriptors, and of them its TCP connections in flight (ESTABLISHED:
    requests, WebSockets and exec sessions under way, kept-alive connections), from Linux's /proc."""
    opened = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed since it was listed
            opened.append(str(fd.readlink()))
    established = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()  # st 01 is ESTABLISHED; field 9 the socket's inode
            if fields[3] == "01":
                established.add(f"socket:[{fields[9]}]")
    return len(opened), sum(at in established for at in opened)


def sample(api: str, metrics_url: str, daemon_pid: int, soak: Soak, stop: threading.Event) -> None:
    """The pools, the stream and the daemon's resources, about once a second (from a thread, as
    ``watch_strength``)."""
    with httpx.Client(base_url=api, timeout=5) as http:
        first = True
        while not stop.wait(0 if first else 1):  # the first at once, before the load
            first = False
            try:
                stats = http.get("/statistics/execution-environments").json()
                details = http.get("/health/details").json()["checks"]
                metrics = http.get(metrics_url).text
            except (httpx.HTTPError, KeyError, ValueError):
                continue
            tasks, backlog, suspect, factory_starting, stops = (
                metric(metrics, name)
                for name in (
                    "supervisor_trio_tasks",
                    "supervisor_factory_backlog",
                    "supervisor_runners_suspect",
                    "supervisor_factory_starting",
                    "supervisor_command_stops_waiting",
                )
            )
            soak.start_seconds = {
                line.split('"')[1]: float(line.split()[-1])
                for line in metrics.splitlines()
                if line.startswith("supervisor_runner_start_seconds_bucket{")
            }
            starting = sum(
                float(line.split()[-1])
                for line in metrics.splitlines()
                if line.startswith("supervisor_runners{") and 'state="starting"' in line
            )
            status = Path(f"/proc/{daemon_pid}/status").read_text().splitlines()
            fds, in_flight = descriptors(daemon_pid)
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
            soak.samples.append(
                {
                    "t": soak.now(),
                    "idle": sum(s["idleRunners"] for s in stats.values()),
                    "used": sum(s["usedRunners"] for s in stats.values()),
                    "stream": details["event_stream"]["state"],
                    "tasks": tasks,
                    # Why a pool is below strength: writes waiting, runners starting or not yet proven.
                    "factory_backlog": backlog,
                    "starting": starting,
                    # Of them, those that hold back registrations (factory.max_starting).
                    "factory_starting": factory_starting,
                    "suspect": suspect,
                    # Each a task of the daemon's, for as long as a fault keeps its command out of reach.
                    "stops_waiting": stops,
                    "fds": fds,
                    # Of them, the connections in flight: they follow the requests under way at the
                    # moment of the sample, which the runners in use do not tell, so the drift's fit
                    # takes them as load.
                    "fds_in_flight": in_flight,
                    "rss_kib": rss,
                }
            )
            soak.sampled.set()
