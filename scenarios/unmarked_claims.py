"""Claims answered just before their daemon dies, and whether the daemon that takes over hands the
same runners out again (``ha_failover``'s SIGKILL).

Nomad has no leader for a few seconds (every server answers every request 500 ``No cluster
leader``, which applies nothing) while the active daemon is asked for runners, and it is killed a
moment later. A claim it answered meanwhile has its ``used`` mark nowhere but in the dead daemon's
memory unless the daemon waited for the mark to land before answering; the daemon that takes over
lists Nomad, and would take such a runner for an idle one. Once it serves, every idle runner it has
is claimed, and no runner ID may have been handed out twice in the whole scenario.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Final

import httpx
import trio

from supervisor.simulator import SimulatedCluster
from supervisor.simulator.http.trouble import Trouble

__all__ = ["claim_every_idle_runner", "claims_while_nomad_has_no_leader", "handed_out_once"]

# How long Nomad has no leader; the claims sent meanwhile; how long they may take to be answered
# before the active is killed.
LEADERLESS: Final = 3.0
CLAIMS: Final = 5
ANSWERED_WITHIN: Final = 1.0

Send = Callable[..., Awaitable[httpx.Response]]


async def claims_while_nomad_has_no_leader(
    cluster: SimulatedCluster,
    http: httpx.AsyncClient,
    api: str,
    claim: dict[str, Any],
    handed_out: Counter[str],
) -> int:
    """Nomad loses its leader; ``CLAIMS`` claims go to the daemon at ``api``, and those it answers
    within ``ANSWERED_WITHIN`` are counted into ``handed_out``. Returns how many it answered."""
    cluster.config.trouble.begin(
        Trouble(LEADERLESS, errors=1.0, slow=0.0, max_delay=0.0, applied=0.0, seed=0)
    )
    answered = 0

    async def one() -> None:
        nonlocal answered
        try:
            response = await http.post(f"{api}/runners", json=claim)
        except httpx.HTTPError:
            return
        if response.status_code == 200:
            handed_out[response.json()["runnerId"]] += 1
            answered += 1

    with trio.move_on_after(ANSWERED_WITHIN):
        async with trio.open_nursery() as claims:
            for _ in range(CLAIMS):
                claims.start_soon(one)
    return answered


async def claim_every_idle_runner(
    send: Send, runners: int, claim: dict[str, Any], handed_out: Counter[str], *, within: float = 10.0
) -> list[str]:
    """Claim as many runners as the pool holds (a moment without an idle one waits briefly), each
    counted into ``handed_out``; returns them, to be given back."""
    taken: list[str] = []
    with trio.move_on_after(within):
        while len(taken) < runners:
            response = await send("POST", "/runners", json=claim)
            if response.status_code != 200:
                await trio.sleep(0.1)
                continue
            runner = response.json()["runnerId"]
            handed_out[runner] += 1
            taken.append(runner)
    return taken


def handed_out_once(handed_out: Counter[str]) -> tuple[bool, object]:
    """Whether no runner ID was handed out twice; the check's value (the first few that were, or
    how many were handed out)."""
    twice = sorted(runner for runner, count in handed_out.items() if count > 1)
    return not twice, twice[:3] or len(handed_out)
