"""A real Prometheus for the tests: Debian's ``prometheus`` on 127.0.0.1, its storage in a temporary
folder, scraping and evaluating every second, and a client of its HTTP API.

Prometheus takes no port 0 it would tell us about, so a free port is found by binding one and
closing it; a start that loses the port to another process in between is retried on a fresh one.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

RULES: Final = Path(__file__).resolve().parents[2] / "scripts" / "monitoring" / "alerts.yml"
JOB: Final = "nomad-runner-supervisor"
# What the rules' durations become in the copy Prometheus loads: every ``for:``, and the stream's
# grace, which the daemon under test is given too.
FOR: Final = "2s"
STREAM_GRACE: Final = 3


def shortened_rules(rules: str) -> str:
    """alerts.yml with every ``for:`` at ``FOR`` and the stream's 30 s grace at ``STREAM_GRACE``."""
    shortened, count = re.subn(r"^(\s+for:) \S+$", rf"\1 {FOR}", rules, flags=re.MULTILINE)
    assert count >= 5, "alerts.yml has fewer for: lines than expected"
    grace = "supervisor_event_stream_down_seconds > 30"
    assert grace in shortened, "alerts.yml no longer tests the stream's grace of 30 s"
    return shortened.replace(grace, f"supervisor_event_stream_down_seconds > {STREAM_GRACE}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def write_config(where: Path, target: str) -> None:
    """prometheus.yml scraping ``target`` (``host:port``) as job ``JOB``, and the shortened rules."""
    (where / "rules.yml").write_text(shortened_rules(RULES.read_text()))
    (where / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files:\n  - rules.yml\n"
        f"scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: ['{target}']\n"
    )


@asynccontextmanager
async def running_prometheus(where: Path) -> AsyncIterator[str]:
    """Prometheus on the configuration ``write_config`` wrote into ``where``; yields its base URL,
    and stops it (and waits for it) on leaving."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            "prometheus is missing: run `python scripts/check.py` as root, whose monitoring step installs "
            "Debian's prometheus package (or apt-get install --no-install-recommends prometheus)"
        )
    log = where / "prometheus.log"
    for _attempt in range(3):
        port = _free_port()
        argv = [
            binary,
            f"--config.file={where / 'prometheus.yml'}",
            f"--storage.tsdb.path={where / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        with log.open("ab") as output:
            process = await trio.lowlevel.open_process(argv, stdout=output, stderr=subprocess.STDOUT)
        try:
            async with _ends_with_this_process(process.pid):
                if await _wait_ready(process, port):
                    yield f"http://127.0.0.1:{port}"
                    return
        finally:
            with trio.move_on_after(10, shield=True) as waited:
                process.terminate()
                await process.wait()
            if waited.cancelled_caught:
                process.kill()
        if b"address already in use" not in log.read_bytes():
            break
    pytest.fail(f"prometheus did not start:\n{log.read_text()[-2000:]}")


@asynccontextmanager
async def _ends_with_this_process(pid: int) -> AsyncIterator[None]:
    """A watcher that kills ``pid`` once this process is gone, however it ends (a test run killed
    leaves no Prometheus behind): the watcher reads its stdin, whose other end only this process
    holds, so the read ends when this process does. Stopped first on the way out, so that it never
    signals a pid the system may have given to another process."""
    watcher = await trio.lowlevel.open_process(["sh", "-c", f"read _; kill {pid}"], stdin=subprocess.PIPE)
    try:
        yield
    finally:
        with trio.move_on_after(5, shield=True):
            watcher.terminate()
            await watcher.wait()
            assert watcher.stdin is not None
            await watcher.stdin.aclose()


async def _wait_ready(process: trio.Process, port: int) -> bool:
    """Whether Prometheus answers ``/-/ready`` within 20 s; False once it has exited."""
    async with httpx.AsyncClient(timeout=1) as http:
        with trio.move_on_after(20):
            while process.poll() is None:
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/-/ready")).status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
                await trio.sleep(0.1)
    return False


class PrometheusApi:
    """Prometheus' HTTP API: instant queries and the active alerts."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now (400 and 422 answers fail the test with Prometheus' words)."""
        response = await self._http.get("/api/v1/query", params={"query": expr})
        assert response.status_code == 200, f"{expr}: {response.text}"
        data: dict[str, Any] = response.json()["data"]
        assert data["resultType"] == "vector", expr
        result: list[dict[str, Any]] = data["result"]
        return result

    async def alerts(self, name: str) -> list[dict[str, Any]]:
        """The active alerts named ``name``, pending or firing."""
        response = await self._http.get("/api/v1/alerts")
        assert response.status_code == 200, response.text
        alerts: list[dict[str, Any]] = response.json()["data"]["alerts"]
        return [alert for alert in alerts if alert["labels"]["alertname"] == name]

    async def wait_firing(self, name: str, *, within: float = 20) -> list[dict[str, Any]]:
        """The firing alerts named ``name``, once there is one (Prometheus is another process:
        its state is polled)."""
        with trio.fail_after(within):
            while True:
                firing = [alert for alert in await self.alerts(name) if alert["state"] == "firing"]
                if firing:
                    return firing
                await trio.sleep(0.25)

    async def wait_scraped(self, expr: str, *, within: float = 10) -> None:
        """Until ``expr`` has a sample: what the daemon showed has reached Prometheus."""
        with trio.fail_after(within):
            while True:
                if await self.query(expr):
                    return
                await trio.sleep(0.25)

    async def wait_resolved(self, name: str, *, within: float = 20) -> None:
        """Until no alert named ``name`` is active any more."""
        with trio.fail_after(within):
            while True:
                if not await self.alerts(name):
                    return
                await trio.sleep(0.25)
