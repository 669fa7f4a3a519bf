"""systemd's notify protocol, against a datagram socket of our own as systemd's: READY=1 after the
first listing, STATUS= lines, WATCHDOG=1 only while the informer moves on, STOPPING=1 at the stop."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio

from supervisor.core.config import ServerSettings, Settings
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon


@pytest.fixture
async def systemd(tmp_path: Path) -> AsyncIterator[tuple[trio.socket.SocketType, str]]:
    path = str(tmp_path / "notify")
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    await sock.bind(path)
    with sock:
        yield sock, path


async def messages_within(sock: trio.socket.SocketType, seconds: float) -> list[str]:
    received: list[str] = []
    with trio.move_on_after(seconds):
        while True:
            received.append((await sock.recv(4096)).decode())
    return received


async def test_ready_status_watchdog_and_stopping(
    nursery: trio.Nursery, systemd: tuple[trio.socket.SocketType, str], sim_config: SimConfig
) -> None:
    sock, path = systemd
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    environ = {"NOMAD_ADDR": ",".join(cluster.addresses), "NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000"}
    daemon = Daemon(Settings(server=ServerSettings(port=0)), environ=environ)
    await nursery.start(daemon.run)

    first = await messages_within(sock, 2.5)
    ready = [m for m in first if "READY=1" in m]
    assert len(ready) == 1
    assert any(line.startswith("STATUS=stream ") for line in ready[0].splitlines()), "with its status"
    statuses = [line for m in first for line in m.splitlines() if line.startswith("STATUS=")]
    assert statuses[-1] == "STATUS=stream up; idle runners none; 0 executions running"
    assert sum("WATCHDOG=1" in m for m in first) >= 3, "pinged every half WATCHDOG_USEC"

    assert daemon.service is not None
    daemon.service.informer.making_progress = lambda within: False  # type: ignore[method-assign]
    stuck = await messages_within(sock, 2.0)
    assert not any("WATCHDOG=1" in m for m in stuck), "a stuck informer gets the daemon restarted"

    daemon.stop()
    assert "STOPPING=1" in (await messages_within(sock, 1.0))[0].splitlines()


def test_an_abstract_socket_name_and_no_socket_at_all() -> None:
    from supervisor.ops.systemd import SystemdNotifier

    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0supervisor-test-notify")
        notifier = SystemdNotifier({"NOTIFY_SOCKET": "@supervisor-test-notify"})
        notifier.notify("READY=1", "STATUS=hello")
        assert listener.recv(100) == b"READY=1\nSTATUS=hello"
        notifier.close()
    silent = SystemdNotifier({})
    assert not silent.enabled
    silent.notify("READY=1")  # nothing to send to, nothing raised
    assert SystemdNotifier({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "1"}).watchdog_interval is None


async def test_an_informer_stuck_in_a_relist_is_not_making_progress_though_heartbeats_come(
    nursery: trio.Nursery, sim_config: SimConfig
) -> None:
    """Nomad's heartbeats are read by the stream's task while a relist is stuck (here on a lock
    it needs): they must not keep the watchdog fed."""
    cluster = await nursery.start(SimulatedCluster(attrs.evolve(sim_config, heartbeat_interval=0.3)).run)
    daemon = Daemon(
        Settings(server=ServerSettings(port=0)), environ={"NOMAD_ADDR": ",".join(cluster.addresses)}
    )
    await nursery.start(daemon.run)
    assert daemon.service is not None
    service, watcher = daemon.service, daemon.service.informer
    await watcher.synced.wait()
    await trio.sleep(1.0)
    assert watcher.making_progress(1.0), "a quiet stream with heartbeats is progress"
    release = trio.Event()

    async def hold_the_lock() -> None:
        async with service.environments.lock:
            await release.wait()

    nursery.start_soon(hold_the_lock)
    await trio.sleep(0.1)
    service.relists.request("periodic")
    await trio.sleep(2.0)
    assert not watcher.making_progress(1.0)
    release.set()
    await trio.sleep(0.5)
    assert watcher.making_progress(1.0), "moving again"
    daemon.stop()
