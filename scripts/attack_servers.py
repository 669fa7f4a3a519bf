"""The servers ``http_attacks.py`` attacks, each a process of its own at a soft and hard RLIMIT_NOFILE of
1,024: ``supervisor run`` on its embedded simulated cluster, with a claimed runner holding a large
file, and hypercorn serving a small ASGI app with the same paths (``HYPERCORN_APP``). A server's
descriptors and RSS are summed over its processes.
"""

from __future__ import annotations

import collections
import contextlib
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import httpx
import orjson
import trio
from attrs import define
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import AcceptConnection, Request, TextMessage

FD_LIMIT: Final = 1024
# What the normal client asks for: 200 whatever the pools and the stream (the health route is not).
NORMAL_PATH: Final = "/api/v1/version"
BODY_PATH: Final = "/api/v1/runners"
ENVIRONMENT: Final = {
    "image": "python:3.12-slim",
    "prewarmingPoolSize": 2,
    "cpuLimit": 100,
    "memoryLimit": 256,
    "networkAccess": False,
    "exposedPorts": [],
}
DOWNLOAD_SIZE: Final = 64 * 1024 * 1024
HYPERCORN_APP: Final = f'''
import asyncio

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({{"type": "lifespan.startup.complete"}})
        await send({{"type": "lifespan.shutdown.complete"}})
    elif scope["type"] == "websocket":
        await receive()
        await send({{"type": "websocket.accept"}})
        while (await receive())["type"] != "websocket.disconnect":
            pass
    elif scope["path"] == "{NORMAL_PATH}":
        await send({{"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]}})
        await send({{"type": "http.response.body", "body": b"0.1.0"}})
    elif scope["path"] == "/download":
        headers = [(b"content-length", b"{DOWNLOAD_SIZE}")]
        await send({{"type": "http.response.start", "status": 200, "headers": headers}})
        chunk = bytes(64 * 1024)
        for _ in range({DOWNLOAD_SIZE} // len(chunk)):
            await send({{"type": "http.response.body", "body": chunk, "more_body": True}})
        await send({{"type": "http.response.body", "body": b""}})
    else:
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = b'{{"message": "read %d bytes"}}' % len(body)
        await send({{"type": "http.response.start", "status": 400, "headers": []}})
        await send({{"type": "http.response.body", "body": answer}})
'''


@define
class Target:
    """A server under attack: its process, where it listens, and the paths the attacks take."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    download: str = "/download"
    runner: str = ""
    # A fresh WebSocket path for each silent WebSocket (the daemon's execution URLs are single-use).
    websocket_path: Callable[[], Awaitable[str]] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fds(self) -> int:
        """Descriptors open, over the server's processes (one that has just ended counts none)."""
        total = 0
        for pid in _tree(self.process.pid):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += len(os.listdir(f"/proc/{pid}/fd"))
        return total

    def rss(self) -> int:
        """Bytes resident, over the server's processes."""
        total = 0
        for pid in _tree(self.process.pid):
            with contextlib.suppress(FileNotFoundError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        return total

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _tree(pid: int) -> list[int]:
    """The process and its descendants."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                children[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def _wait_for_line(process: subprocess.Popen[bytes], log: Path, marker: str) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if marker in line:
                return line.split(marker, 1)[1].strip()
        if process.poll() is not None:
            raise RuntimeError(f"the server exited early; see {log}")
        time.sleep(0.05)
    raise RuntimeError(f"the server did not start; see {log}")


def start_daemon(workdir: Path, settings: dict[str, Any] | None = None, *, download: bool = False) -> Target:
    """``supervisor run`` on its embedded cluster, at the fd limit, with ``[server]`` ``settings``;
    an environment with a claimed runner, for the executions, holding a large file to download if
    ``download``."""
    config = workdir / "supervisor.toml"
    lines = ["[server]", *(f"{key} = {value!r}" for key, value in (settings or {}).items())]
    config.write_text("\n".join(lines) + "\n")
    log = workdir / "daemon.log"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    argv = [sys.executable, "-m", "supervisor", "run", "--listen", "127.0.0.1:0", "--config", str(config)]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, env=environ, preexec_fn=_limit_fds
        )
    address = _wait_for_line(process, log, "serving the API on ")
    target = Target("ours", process, int(address.rsplit(":", 1)[1]), log)
    with httpx.Client(base_url=address + "/api/v1", timeout=30) as http:
        assert http.put("/execution-environments/10", json=ENVIRONMENT).status_code in (201, 204)
        target.runner = runner = _claim(http)
        target.download = f"/api/v1/runners/{runner}/files/raw?path=big.bin"
    if download:
        trio.run(_execute, address, runner, f"head -c {DOWNLOAD_SIZE} /dev/zero > big.bin")

    async def execution_path() -> str:
        async with httpx.AsyncClient(base_url=address + "/api/v1", timeout=30) as http:
            body = {"command": "sleep 3600", "timeLimit": 0}
            response = await http.post(f"/runners/{runner}/execute", json=body)
        return "/" + str(response.json()["websocketUrl"]).split("/", 3)[3]

    target.websocket_path = execution_path
    return target


def _claim(http: httpx.Client) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        response = http.post("/runners", json={"executionEnvironmentId": 10, "inactivityTimeout": 600})
        if response.status_code == 200:
            return str(response.json()["runnerId"])
        time.sleep(0.05)
    raise RuntimeError("no runner could be claimed")


async def _execute(address: str, runner: str, command: str) -> None:
    async with httpx.AsyncClient(base_url=address + "/api/v1", timeout=30) as http:
        response = await http.post(f"/runners/{runner}/execute", json={"command": command})
    path = "/" + response.json()["websocketUrl"].split("/", 3)[3]
    stream, client = await open_websocket(int(address.rsplit(":", 1)[1]), path)
    async with stream:
        while client.state is ConnectionState.OPEN and (data := await stream.receive_some()):
            client.receive_data(bytes(data))
            for event in client.events():
                if isinstance(event, TextMessage) and orjson.loads(event.data)["type"] == "exit":
                    return
    raise RuntimeError(f"{command!r} did not exit")


def start_hypercorn(hypercorn: str, workdir: Path) -> Target:
    """hypercorn with its defaults serving ``HYPERCORN_APP``, at the same fd limit."""
    (workdir / "attack_app.py").write_text(HYPERCORN_APP)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = workdir / "hypercorn.log"
    argv = [hypercorn, "--bind", f"127.0.0.1:{port}", "attack_app:app"]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, cwd=workdir, preexec_fn=_limit_fds
        )
    _wait_for_line(process, log, "Running on")
    return Target("hypercorn", process, port, log)


async def open_websocket(port: int, path: str) -> tuple[trio.SocketStream, WSConnection]:
    """A WebSocket opened by hand, on which the caller then sends what it likes (pongs included)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    client = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(client.send(Request(host=f"127.0.0.1:{port}", target=path)))
    while client.state is ConnectionState.CONNECTING:
        client.receive_data(bytes(await stream.receive_some()))
        for event in client.events():  # the first messages may come with the accept: left unread
            if isinstance(event, AcceptConnection):
                break
            raise RuntimeError(f"the WebSocket was refused: {event}")
    return stream, client
