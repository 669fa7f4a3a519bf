"""The chaos soak's load, as CodeOcean works: claim, check the workspace is empty, copy a file
with a fresh token, run it, check the output and the one terminal message, release."""

from __future__ import annotations

import base64
import json
import random
import uuid
from typing import Final

import httpx
import trio
import trio_websocket
from soak_record import ENVIRONMENTS, Soak

from supervisor.simulator import SimulatedCluster

# As CodeOcean claims: a runner whose client vanished (or lost the claim's answer) expires.
INACTIVITY_TIMEOUT: Final = 60


def node_of(cluster: SimulatedCluster, runner: str) -> str:
    """The node the runner's live allocation is on ("" if none is)."""
    allocs = cluster.state.allocs_by_job.get(("default", runner), {}).values()
    return next((a.node_name for a in allocs if not a.client_terminal), "")


async def one_execution(
    http: httpx.AsyncClient, cluster: SimulatedCluster, soak: Soak, rng: random.Random
) -> None:
    """Claim, check the workspace, copy, run, check the output, release; again on 410."""
    for _ in range(20):
        environment = rng.choice(ENVIRONMENTS)
        claim = await http.post(
            "/runners", json={"executionEnvironmentId": environment, "inactivityTimeout": INACTIVITY_TIMEOUT}
        )
        if claim.status_code != 200:
            soak.retries += 1
            await trio.sleep(0.2)
            continue
        runner = claim.json()["runnerId"]
        if runner in soak.handed_out:
            soak.violations["handed_out_twice"].append(runner)
        soak.handed_out.add(runner)
        try:
            if await run_in(http, cluster, soak, rng, runner):
                return
        finally:
            await http.delete(f"/runners/{runner}")
        soak.retries += 1


async def run_in(
    http: httpx.AsyncClient, cluster: SimulatedCluster, soak: Soak, rng: random.Random, runner: str
) -> bool:
    """False when the runner was gone (410) before the execution started: claim another."""
    files = f"/runners/{runner}/files"
    listing = await http.get(files)
    if listing.status_code == 410:
        return False
    if listing.status_code == 200 and listing.json()["files"]:
        soak.violations["workspace_not_empty"].append(runner)
    token = uuid.uuid4().hex
    patch = {
        "delete": ["./*"],
        "copy": [{"path": "f.txt", "content": base64.b64encode(token.encode()).decode()}],
    }
    copied = await http.patch(files, json=patch)
    if copied.status_code != 204:
        return copied.status_code != 410
    pause = round(rng.uniform(0.1, 3.0), 2)
    prepared = await http.post(
        f"/runners/{runner}/execute", json={"command": f"cat f.txt; sleep {pause}; echo ."}
    )
    if prepared.status_code != 200:
        return prepared.status_code != 410
    start, messages, node = soak.now(), [], node_of(cluster, runner)
    try:
        with trio.move_on_after(120):
            async with trio_websocket.open_websocket_url(prepared.json()["websocketUrl"]) as ws:
                try:
                    while True:
                        messages.append(json.loads(await ws.get_message()))
                except trio_websocket.ConnectionClosed:
                    pass
    except trio_websocket.ConnectionRejected:
        return False  # the runner went before the execution started: nothing ran, claim another
    ends = [m for m in messages if m["type"] in ("exit", "timeout", "error")]
    outcome = ends[-1]["type"] if ends else "none"
    soak.lives.append({"start": start, "end": soak.now(), "outcome": outcome})
    if len(ends) != 1:
        soak.violations["terminal_messages"].append({"runner": runner, "ends": ends})
    else:
        output = "".join(m["data"] for m in messages if m["type"] == "stdout")
        whole = f"{token}.\n"
        clean = outcome == "exit" and ends[-1]["data"] == 0
        # A command killed under its execution printed a part of its output, all of it there.
        lost = (output != whole) if clean else (outcome == "exit" and not whole.startswith(output))
        if lost:
            soak.violations["lost_output"].append({"runner": runner, "output": output[:80]})
        if clean:
            return True
        fault = soak.culprit(start, soak.now(), node, runner)
        error = {"runner": runner, "node": node, "at": start, "end": ends[-1], "fault": fault}
        soak.errors.append(error)
        if fault is None:
            soak.violations["unexplained_errors"].append(error)
    return True
