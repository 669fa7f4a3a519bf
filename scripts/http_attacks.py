"""Hostile and broken HTTP clients against the daemon's API server, and against hypercorn beside it.

    python scripts/http_attacks.py [--hypercorn PATH] [--only ATTACK ...] [--seconds 20] [--scale 1]

Each attack runs against a fresh ``supervisor run`` on its embedded simulated cluster, started with
its soft and hard RLIMIT_NOFILE at 1,024 (what systemd gives a unit without ``LimitNOFILE``) and its
defaults, and, given ``--hypercorn`` (a hypercorn installed by the user in a virtual environment
outside the repository: ``python -m venv ~/hc && ~/hc/bin/pip install hypercorn``, then
``--hypercorn ~/hc/bin/hypercorn``), against hypercorn with its defaults under the same limit,
serving a small ASGI app with the same paths (``HYPERCORN_APP``: a version route, a route that reads
a whole body, a large download, a WebSocket that sends nothing). Beside each attack a normal client,
in a thread of its own, asks for the version (200 always) on a new connection every 50 ms, as it
does for a second before the attack (its baseline).

Prints one row per attack and server: the normal client's latency p50/p99 before and during the
attack (of its requests answered), its requests left unanswered (no answer within 5 s) and refused
(another status than 200: a 503 of a connection cap), the server's descriptors and RSS
(summed over its processes) before, at their peak and after (once the attacker has closed its
connections and the server has let go of them, waiting up to 10 s), and how the attacker's
connections ended (each ending: what the server answered, whether it closed the connection, how many
ended so and their median time).

The attacks (``ATTACKS``): thousands of slowloris heads; 1,500 idle keep-alive connections; bodies
that stall; malformed chunked framing; Content-Length with Transfer-Encoding; 8 large bodies at once;
downloads of 64 MiB never read; silent WebSockets (on the daemon, each on an execution with no time
limit).
``tests/daemon/test_http_attacks.py`` runs them, smaller, against the daemon and asserts.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import resource
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Final

import trio
from attack_servers import (
    BODY_PATH,
    DOWNLOAD_SIZE,
    NORMAL_PATH,
    Target,
    open_websocket,
    start_daemon,
    start_hypercorn,
)
from attrs import define, field
from wsproto.events import CloseConnection, Ping

# -- the normal client -----------------------------------------------------------------------------


@define
class Probe:
    """The normal client's requests: the latency (seconds) of each answered, and how many were
    refused (another status than 200: a 503 of a connection cap) or left unanswered."""

    latencies: list[float] = field(factory=list)
    unanswered: int = 0
    statuses: collections.Counter[int] = field(factory=collections.Counter)

    @property
    def refused(self) -> int:
        return sum(count for status, count in self.statuses.items() if status != 200)

    @property
    def asked(self) -> int:
        return sum(self.statuses.values()) + self.unanswered

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _one_request(port: int, path: str, timeout: float) -> int | None:
    """One GET on a new connection; its status, or None when unanswered within ``timeout``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n".encode())
            received = b""
            while b"\r\n" not in received:
                data = sock.recv(4096)
                if not data:
                    return None
                received += data
            return int(received.split(b" ", 2)[1])
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def normal_client(port: int, path: str = NORMAL_PATH, *, interval: float = 0.05) -> Iterator[Probe]:
    """A client asking for ``path`` every ``interval`` from a thread of its own, until the block ends."""
    probe, done = Probe(), threading.Event()

    def run() -> None:
        while not done.is_set():
            began = time.perf_counter()
            status = _one_request(port, path, timeout=5.0)
            if status is None:
                probe.unanswered += 1
            else:
                probe.statuses[status] += 1
                probe.latencies.append(time.perf_counter() - began)
            done.wait(interval)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield probe
    finally:
        done.set()
        thread.join()


# -- the attacks -------------------------------------------------------------------------------------


@define
class Endings:
    """How the attacker's connections ended: (what the server answered, how it ended) -> times."""

    seen: list[tuple[str, float]] = field(factory=list)

    def add(self, ending: str, began: float) -> None:
        self.seen.append((ending, time.monotonic() - began))

    def summary(self) -> str:
        """Each ending, most common first, with how many ended so and their median time."""
        if not self.seen:
            return "-"
        parts = []
        for ending, count in collections.Counter(ending for ending, _ in self.seen).most_common():
            seconds = statistics.median(s for e, s in self.seen if e == ending)
            parts.append(f"{ending}: {count} ({seconds:.1f} s)")
        return "; ".join(parts)

    def counts(self) -> collections.Counter[str]:
        return collections.Counter(ending for ending, _ in self.seen)


_OPENING: Final = trio.lowlevel.RunVar[trio.CapacityLimiter]("opening")


async def _connect(port: int) -> trio.SocketStream | None:
    """A new connection, at most 100 being opened at a time; None when it cannot be opened."""
    try:
        opening = _OPENING.get()
    except LookupError:
        opening = trio.CapacityLimiter(100)
        _OPENING.set(opening)
    async with opening:
        try:
            return await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            return None


async def _outcome(stream: trio.SocketStream, until: float) -> str:
    """What the server sends until it closes or ``until`` (trio time): its first status or close
    code, and whether it closed (a reset counts as closed)."""
    received = b""
    with trio.move_on_at(until):
        try:
            while data := await stream.receive_some(65536):
                if len(received) < 4096:
                    received += data
        except trio.BrokenResourceError:
            pass
        return f"{_status(received)}, closed"
    return f"{_status(received)}, open at the end"


def _status(received: bytes) -> str:
    if received.startswith(b"HTTP/1.1 "):
        return received.split(b" ", 2)[1].decode()
    return "no answer" if not received else "bytes"


async def _hold(stream: trio.SocketStream, until: float, dribble: bytes = b"") -> str:
    """Read what the server sends until it closes or ``until`` (``_outcome``), meanwhile sending
    ``dribble`` once a second if given."""
    ended = ""

    async def read(cancel: trio.CancelScope) -> None:
        nonlocal ended
        ended = await _outcome(stream, until)
        cancel.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read, nursery.cancel_scope)
        if dribble:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                while True:
                    await trio.sleep(1)
                    await stream.send_all(dribble)
    return ended


async def _each(count: int, one: Callable[[], Awaitable[None]]) -> None:
    """``count`` connections at once."""
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)


Attack = Callable[[Target, Endings, float, int], Awaitable[None]]


async def slowloris(target: Target, endings: Endings, seconds: float, scale: int) -> None:
    """Heads sent a header line a second, never finished: 2,000 connections."""
    end = trio.current_time() + seconds

    async def one() -> None:
        began = time.monotonic()
        if (stream := await _connect(target.port)) is None:
            return endings.add("refused at connect", began)
        async with stream:
            with contextlib.suppress(trio.BrokenResourceError):
                await stream.send_all(f"GET {NORMAL_PATH} HTTP/1.1\r\nHost: api\r\n".encode())
            endings.add(await _hold(stream, end, b"X-Slow: yes\r\n"), began)

    await _each(2000 // scale, one)


async def idle_keep_alive(target: Target, endings: Endings, seconds: float, scale: int) -> None:
    """1,500 connections that each ask once, then keep the connection and say nothing."""
    end = trio.current_time() + seconds

    async def one() -> None:
        began = time.monotonic()
        if (stream := await _connect(target.port)) is None:
            return endings.add("refused at connect", began)
        async with stream:
            with contextlib.suppress(trio.BrokenResourceError):
                await stream.send_all(f"GET {NORMAL_PATH} HTTP/1.1\r\nHost: api\r\n\r\n".encode())
            endings.add(await _outcome(stream, end), began)

    await _each(1500 // scale, one)


def _body_attack(head: str, body: bytes, count: int, *, scaled: bool = False) -> Attack:
    async def attack(target: Target, endings: Endings, seconds: float, scale: int) -> None:
        end = trio.current_time() + seconds

        async def one() -> None:
            began = time.monotonic()
            if (stream := await _connect(target.port)) is None:
                return endings.add("refused at connect", began)
            async with stream:
                with contextlib.suppress(trio.BrokenResourceError):
                    await stream.send_all(head.encode() + body)
                endings.add(await _outcome(stream, end), began)

        await _each(max(1, count // scale) if scaled else count, one)

    return attack


stalled_body = _body_attack(
    f"POST {BODY_PATH} HTTP/1.1\r\nHost: api\r\nContent-Length: 100000\r\n\r\n",
    b'{"executionEnvironmentId": 10, "x": "',
    200,
    scaled=True,
)


async def bad_chunks(target: Target, endings: Endings, seconds: float, scale: int) -> None:
    """Malformed chunked bodies: a size "2x", a size of 32 hex digits, bare LFs; 10 of each."""
    head = f"POST {BODY_PATH} HTTP/1.1\r\nHost: api\r\nTransfer-Encoding: chunked\r\n\r\n"
    for body in (b"2x\r\nab\r\n0\r\n\r\n", b"0" * 31 + b"2\r\nab\r\n0\r\n\r\n", b"2\nab\n0\n\n"):
        await _body_attack(head, body, 10)(target, endings, seconds, scale)


async def content_length_and_chunked(target: Target, endings: Endings, seconds: float, scale: int) -> None:
    """A request with both Content-Length and Transfer-Encoding: the connection must close after it."""
    head = (
        f"POST {BODY_PATH} HTTP/1.1\r\nHost: api\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    await _body_attack(head, b"2\r\n{}\r\n0\r\n\r\n", 30)(target, endings, seconds, scale)


async def large_bodies(target: Target, endings: Endings, seconds: float, scale: int) -> None:
    """8 bodies of 50 MiB (divided by the scale) at once, sent as fast as the server reads them;
    each client closes once answered."""
    size = 50 * 1024 * 1024 // scale
    end = trio.current_time() + seconds
    pad = b"x" * (size - 64)
    body = b'{"executionEnvironmentId": 10, "x": "' + pad[: size - 40] + b'"}'

    async def one() -> None:
        began = time.monotonic()
        if (stream := await _connect(target.port)) is None:
            return endings.add("refused at connect", began)
        async with stream:
            head = f"POST {BODY_PATH} HTTP/1.1\r\nHost: api\r\nContent-Length: {len(body)}\r\n\r\n"
            try:
                await stream.send_all(head.encode())
                for start in range(0, len(body), 1024 * 1024):
                    await stream.send_all(body[start : start + 1024 * 1024])
            except trio.BrokenResourceError:
                pass
            received = b""
            with trio.move_on_at(end), contextlib.suppress(trio.BrokenResourceError):
                while b"\r\n" not in received and (data := await stream.receive_some()):
                    received += data
            endings.add(f"{_status(received)}, then closed by the client", began)

    await _each(8, one)


async def unread_download(target: Target, endings: Endings, seconds: float, scale: int) -> None:
    """4 downloads whose clients read nothing until the attack's end: then they read, and find
    the download cut or whole."""

    async def one() -> None:
        began = time.monotonic()
        if (stream := await _connect(target.port)) is None:
            return endings.add("refused at connect", began)
        async with stream:
            with contextlib.suppress(trio.BrokenResourceError):
                await stream.send_all(f"GET {target.download} HTTP/1.1\r\nHost: api\r\n\r\n".encode())
            await trio.sleep(seconds)
            # Then read: a server that cut the connection left part of the download, then the end.
            received, ending = 0, "open at the end"
            with trio.move_on_after(10):
                try:
                    while data := await stream.receive_some(1024 * 1024):
                        received += len(data)
                        if received >= DOWNLOAD_SIZE:
                            break
                    ending = "cut" if received < DOWNLOAD_SIZE else "read whole"
                except trio.BrokenResourceError:
                    ending = "cut"
            endings.add(ending, began)

    await _each(4, one)


async def silent_websocket(target: Target, endings: Endings, seconds: float, scale: int) -> None:
    """4 WebSockets (on the daemon, executions of ``sleep 3600`` with no time limit) whose clients
    then send nothing, not even a pong, as a peer gone without a word."""
    end = trio.current_time() + seconds

    async def one() -> None:
        path = await target.websocket_path() if target.websocket_path else "/websocket"
        began = time.monotonic()
        stream, client = await open_websocket(target.port, path)
        ending, pinged = "open at the end", False
        async with stream:
            with trio.move_on_at(end):
                try:
                    while data := await stream.receive_some(65536):
                        client.receive_data(bytes(data))
                        for event in client.events():
                            pinged = pinged or isinstance(event, Ping)
                            if isinstance(event, CloseConnection):
                                ending = f"close {event.code}"
                except trio.BrokenResourceError:
                    pass
                ending += ", closed" if ending != "open at the end" else ""
        endings.add(("pinged, " if pinged else "") + ending, began)

    await _each(4, one)


ATTACKS: Final[dict[str, Attack]] = {
    "slowloris": slowloris,
    "idle keep-alive": idle_keep_alive,
    "stalled body": stalled_body,
    "bad chunk framing": bad_chunks,
    "CL+TE": content_length_and_chunked,
    "large bodies": large_bodies,
    "unread download": unread_download,
    "silent WebSocket": silent_websocket,
}


# -- one attack, measured --------------------------------------------------------------------------


@define
class Measured:
    """One attack on one server, measured."""

    baseline: Probe
    during: Probe
    fds: tuple[int, int, int]
    rss: tuple[int, int, int]
    endings: Endings


async def measure(
    target: Target,
    attack: Attack,
    *,
    seconds: float,
    scale: int = 1,
    settle: float = 10.0,
    baseline_seconds: float = 1.0,
) -> Measured:
    """The normal client's baseline, then the attack with the normal client beside it, sampling the
    server's fds and RSS; then wait (up to ``settle``) for its fds to come back."""
    with normal_client(target.port) as baseline:
        await trio.sleep(baseline_seconds)
    fds_before, rss_before = target.fds(), target.rss()
    peaks = [fds_before, rss_before]
    endings = Endings()

    async def sample(task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        while True:
            peaks[0], peaks[1] = max(peaks[0], target.fds()), max(peaks[1], target.rss())
            await trio.sleep(0.1)

    with normal_client(target.port) as during:
        async with trio.open_nursery() as nursery:
            await nursery.start(sample)
            at_least = trio.current_time() + baseline_seconds  # as many normal requests as before
            await attack(target, endings, seconds, scale)
            await trio.sleep_until(at_least)
            nursery.cancel_scope.cancel()
    deadline = trio.current_time() + settle
    while target.fds() > fds_before and trio.current_time() < deadline:  # noqa: ASYNC110 (another process)
        await trio.sleep(0.1)
    await trio.sleep(0.5)
    return Measured(
        baseline,
        during,
        (fds_before, peaks[0], target.fds()),
        (rss_before, peaks[1], target.rss()),
        endings,
    )


def _row(name: str, server: str, m: Measured) -> str:
    mib = [f"{value / 2**20:.0f}" for value in m.rss]
    latency = f"{m.during.percentile(0.5) * 1000:.1f}/{m.during.percentile(0.99) * 1000:.1f}"
    base = f"{m.baseline.percentile(0.5) * 1000:.1f}"
    during = m.during
    return (
        f"| {name} | {server} | {base} | {latency} | {during.unanswered}/{during.refused}/{during.asked} "
        f"| {'/'.join(map(str, m.fds))} | {'/'.join(mib)} | {m.endings.summary()} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hypercorn", help="a hypercorn executable, installed outside the repository")
    parser.add_argument("--only", nargs="*", choices=sorted(ATTACKS), help="these attacks only")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each attack holds on")
    parser.add_argument("--scale", type=int, default=1, help="divide the connections and sizes by this")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the attacker's own connections
    print(
        "| attack | server | normal p50 before (ms) | normal p50/p99 during (ms) | unanswered/refused/asked "
        "| fds before/peak/after | RSS MiB before/peak/after | the attacker's connections ended |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, attack in ATTACKS.items():
        if args.only and name not in args.only:
            continue
        daemon = partial(start_daemon, download=attack is unread_download)
        starts: list[tuple[str, Callable[[Path], Target]]] = [("ours", daemon)]
        if args.hypercorn:
            starts.append(("hypercorn", lambda workdir: start_hypercorn(args.hypercorn, workdir)))
        for server, start in starts:
            with tempfile.TemporaryDirectory() as workdir:
                target = start(Path(workdir))
                try:
                    measured = trio.run(
                        partial(measure, target, attack, seconds=args.seconds, scale=args.scale)
                    )
                finally:
                    target.stop()
                print(_row(name, server, measured), flush=True)


if __name__ == "__main__":
    main()
