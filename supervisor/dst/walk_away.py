"""A client who walks away from an execution mid-run (a browser tab closed, a laptop shut): its
WebSocket is cut without a close frame while the command runs on, and Nomad leaves the command
running (nomad-api.md §5) until the daemon stops it. The client comes back to its runner a while
later. Whether a use begins so, and its times, are drawn from a stream of their own, so that the
load's other draws stay what they were.
"""

from __future__ import annotations

import json
import random
from typing import Final
from urllib.parse import urlsplit

import httpx
import trio
import trio_websocket
from attrs import frozen

from .checks import Checks
from .world import World

__all__ = ["WalkAway", "walk_away", "walk_away_drawn"]

# The share of uses that begin with an execution walked away from.
_SHARE: Final = 0.1
_PATIENCE: Final = 60.0
# Long enough that only a stop ends it before its client comes back.
_COMMAND: Final = "echo {token}; sleep 60"
_TIME_LIMIT: Final = 120


@frozen
class WalkAway:
    """How long after its start the client cuts the execution, and thinks before coming back."""

    cut_after: float
    think: float


def walk_away_drawn(seed: int, student: str, use: int) -> WalkAway | None:
    """Whether the ``use``-th use of ``student`` begins with an execution walked away from."""
    rng = random.Random(f"walk away {seed} {student} {use}")
    if rng.random() >= _SHARE:
        return None
    return WalkAway(round(rng.uniform(0.2, 3.0), 3), round(rng.uniform(0.5, 20.0), 3))


async def walk_away(
    walk: WalkAway, world: World, checks: Checks, http: httpx.AsyncClient, base: str, runner: str, token: str
) -> bool:
    """Start a long command in ``runner``, cut its socket ``walk.cut_after`` s after its start, and
    come back ``walk.think`` s later; False once the runner is gone."""
    body = {"command": _COMMAND.format(token=token), "timeLimit": _TIME_LIMIT}
    prepared = await http.post(f"{base}/runners/{runner}/execute", json=body)
    if prepared.status_code != 200:
        return checks.answered(runner, "execute", prepared.status_code, prepared.text)
    url = prepared.json()["websocketUrl"]
    checks.trace.record("walk_away", f"{runner} cut {walk.cut_after} after its start")
    if await _cut_after_start(world, url, walk.cut_after) and checks.overdue is not None:
        checks.overdue.execution_ended(url, runner, trio.current_time())
    await trio.sleep(walk.think)
    return True


async def _cut_after_start(world: World, url: str, cut_after: float) -> bool:
    """Connect, wait for ``start``, and cut the connection ``cut_after`` s later (or when it breaks
    first); whether the execution started."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    try:
        stream = await world.network.connect(parts.hostname, parts.port)
    except OSError:
        return False
    started = False
    try:
        with trio.move_on_after(_PATIENCE):
            async with trio.open_nursery() as nursery:
                ws = await trio_websocket.wrap_client_stream(
                    nursery,
                    stream,  # type: ignore[arg-type]  # any trio stream
                    parts.hostname,
                    f"{parts.path}?{parts.query}",
                )
                while not started:
                    kind = json.loads(await ws.get_message()).get("type")
                    if kind in ("exit", "timeout", "error"):
                        return False
                    started = kind == "start"
                await trio.sleep(cut_after)
                nursery.cancel_scope.cancel("the client walks away")
    except* (
        trio_websocket.HandshakeError,
        trio_websocket.ConnectionClosed,
        trio.BrokenResourceError,
        OSError,
    ):
        pass  # the daemon went first: what it ended, it ended when the client saw it
    finally:
        await trio.aclose_forcefully(stream)
    return started
