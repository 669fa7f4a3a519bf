"""A deployment configured for Poseidon gets what Poseidon makes: the daemon at its defaults.

    python scenarios/poseidon_parity.py [--runners N] [--seed S] [--report FILE] [--plot FILE.svg]

Against a simulated cluster of 3 nodes, with no setting changed. The runner job of an offline
environment is Poseidon's template: a batch job, ``default-group`` with a 10 MB ephemeral disk, a
spread over ``${node.unique.name}``, logs of 1 x 1 MB, docker's ``network_mode = "none"`` and the
count-0 ``config`` group; ``force_pull`` is true on the runners that fill the pool and false on the
one that replaces a claimed runner. A networked environment without exposed ports gets the group
network of ``[nomad.network]`` (``bridge``) and no docker ``network_mode``: never Docker's default
bridge. An execution runs under ``/sbin/setuser user``, in bash, on a terminal, with stderr apart; a
privileged one runs as the task's user. An identical PUT after the image's tag moved to a new digest
replaces every idle runner with one that runs the new digest, while a held runner finishes its
execution on the old one and is gone once given back; then every runner of the pool runs the new
digest (a claim's replacement, which does not pull, runs the old one on a node that no runner of the
roll-out reached). ``path=/`` lists the container's root for a privileged request, and a download
carries ``Content-Length``. No runner job leaks.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import time
from typing import Any, Final

import httpx
import trio
import trio_websocket
from harness import (
    ENVIRONMENT,
    ENVIRONMENT_ID,
    EXIT_0,
    Scenario,
    open_scenario,
    parse_arguments,
    run,
    terminal_messages,
)

from supervisor.simulator import SimConfig

NETWORKED_ID: Final = 11
IMAGE: Final = str(ENVIRONMENT["image"])  # a tag other than latest, which every start pulls anew
SPREAD: Final = [{"Attribute": "${node.unique.name}", "Weight": 100}]
WITHIN: Final = 60.0


def runner_spec(scenario: Scenario, runner_id: str) -> dict[str, Any]:
    return scenario.cluster.state.jobs[("default", runner_id)].spec


def docker_config(scenario: Scenario, runner_id: str) -> dict[str, Any]:
    return dict(runner_spec(scenario, runner_id)["TaskGroups"][0]["Tasks"][0]["Config"])


def force_pull(scenario: Scenario, runner_id: str) -> bool:
    return bool(docker_config(scenario, runner_id).get("force_pull"))


def live_runner_jobs(scenario: Scenario, environment_id: int) -> set[str]:
    prefix = f"{environment_id}-"
    return {j for (_, j), job in scenario.cluster.state.jobs.items() if j.startswith(prefix) and not job.stop}


def output(messages: list[dict[str, Any]], stream: str) -> str:
    return "".join(str(m["data"]) for m in messages if m["type"] == stream)


def word_after(text: str, marker: str) -> str:
    """The word that follows ``marker`` in ``text`` ("" if none does)."""
    words = text.split(marker, 1)[1].split() if marker in text else []
    return words[0] if words else ""


def template_options(spec: dict[str, Any]) -> dict[str, Any]:
    """What Poseidon's template sets, as the runner job has it."""
    group = spec["TaskGroups"][0]
    task = group["Tasks"][0]
    config_groups = [g for g in spec["TaskGroups"][1:] if g["Name"] == "config"]
    return {
        "type": spec["Type"],
        "group": group["Name"],
        "disk_mb": (group.get("EphemeralDisk") or {}).get("SizeMB"),
        "spreads": [{"Attribute": s["Attribute"], "Weight": s["Weight"]} for s in group.get("Spreads") or []],
        "logs": [(task.get("LogConfig") or {}).get(k) for k in ("MaxFiles", "MaxFileSizeMB")],
        "network_mode": task["Config"].get("network_mode"),
        "config_group_count": config_groups[0].get("Count") if config_groups else None,
    }


POSEIDON_OPTIONS: Final = {
    "type": "batch",
    "group": "default-group",
    "disk_mb": 10,
    "spreads": SPREAD,
    "logs": [1, 1],
    "network_mode": "none",
    "config_group_count": 0,
}


async def put_environment(scenario: Scenario, environment_id: int, body: dict[str, Any]) -> int:
    response = await scenario.http.put(f"/execution-environments/{environment_id}", json=body)
    response.raise_for_status()
    return response.status_code


def idle_of(scenario: Scenario, environment_id: int) -> int:
    stats = scenario.service.pool.stats().get(environment_id)
    return stats.idle if stats else 0


async def execute(
    scenario: Scenario, runner_id: str, command: str, *, privileged: bool = False
) -> list[dict[str, Any]]:
    body = {"command": command, "privilegedExecution": privileged}
    response = await scenario.http.post(f"/runners/{runner_id}/execute", json=body)
    response.raise_for_status()
    return await scenario.read_execution(response.json()["websocketUrl"])


async def check_runner_job(scenario: Scenario, pool_size: int) -> None:
    """Poseidon's template options on every fill runner, and force_pull as Poseidon sets it."""
    fill = live_runner_jobs(scenario, ENVIRONMENT_ID)
    options = [template_options(runner_spec(scenario, r)) for r in sorted(fill)]
    differing = [o for o in options if o != POSEIDON_OPTIONS]
    scenario.check(
        "runner_job_has_poseidons_template_options",
        len(options) == pool_size and not differing,
        differing[0] if differing else f"{len(options)} runner jobs as Poseidon's",
        POSEIDON_OPTIONS,
    )
    pulls = sorted({force_pull(scenario, r) for r in fill})
    scenario.check("fill_runners_force_pull", pulls == [True], pulls, [True])
    template = f"template-{ENVIRONMENT_ID}"
    pull = force_pull(scenario, template) if ("default", template) in scenario.cluster.state.jobs else None
    scenario.check("environment_registration_force_pull", pull is True, pull, True)


def pulled_on_every_node(scenario: Scenario, environment_id: int) -> bool:
    """Whether every node that takes new allocations runs a runner of the environment that pulled its
    image: then a claim's replacement may skip the pull, as Poseidon's does; otherwise it pulls."""
    state = scenario.cluster.state
    runners = live_runner_jobs(scenario, environment_id)
    pulled = {
        a.node_id
        for a in state.allocs.values()
        if not a.terminal and a.job_id in runners and force_pull(scenario, a.job_id)
    }
    placeable = {
        n.id
        for n in state.nodes.values()
        if n.status == "ready" and n.eligibility == "eligible" and not n.drain_strategy
    }
    return placeable <= pulled


async def claim_with_replacement(scenario: Scenario) -> tuple[str, str | None]:
    """Claim a runner; its ID and that of the runner the pool registered to replace it."""
    before = set(scenario.service.pool.runners)
    claimed = await scenario.claim()
    new: set[str] = set()

    def replaced() -> bool:
        new.update(set(scenario.service.pool.runners) - before)
        return any(("default", r) in scenario.cluster.state.jobs for r in new)

    await scenario.wait_for(replaced, within=WITHIN)
    registered = [r for r in new if ("default", r) in scenario.cluster.state.jobs]
    return claimed, registered[0] if registered else None


async def check_network(scenario: Scenario) -> None:
    """A networked environment without exposed ports: the group network of [nomad.network]."""
    body = {**ENVIRONMENT, "prewarmingPoolSize": 1, "networkAccess": True, "exposedPorts": []}
    await put_environment(scenario, NETWORKED_ID, body)
    warm = await scenario.wait_for(lambda: idle_of(scenario, NETWORKED_ID) == 1, within=WITHIN)
    runners = sorted(live_runner_jobs(scenario, NETWORKED_ID))
    seen = []
    for runner in runners:
        group = runner_spec(scenario, runner)["TaskGroups"][0]
        modes = [n.get("Mode") for n in group.get("Networks") or []]
        seen.append(
            {"group_network": modes, "network_mode": group["Tasks"][0]["Config"].get("network_mode", "")}
        )
    expected = {"group_network": ["bridge"], "network_mode": ""}
    scenario.check(
        "networked_runner_on_nomad_network_mode",
        warm is not None and bool(seen) and all(s == expected for s in seen),
        seen[0] if seen else f"no runner within {WITHIN:g} s",
        expected,
    )
    (await scenario.http.delete(f"/execution-environments/{NETWORKED_ID}")).raise_for_status()
    gone = await scenario.wait_for(lambda: not live_runner_jobs(scenario, NETWORKED_ID), within=WITHIN)
    scenario.check("networked_runner_jobs_removed_s", gone is not None, gone, WITHIN)
    scenario.event("networked environment checked and removed", runners=len(runners))


async def check_execution(scenario: Scenario, runner: str) -> None:
    """Defaults: /sbin/setuser user, bash, a terminal, stderr apart; privileged: the task's user."""
    user = await execute(scenario, runner, 'echo "USER=$USER"')
    seen = output(user, "stdout").strip()
    scenario.check(
        "execution_runs_as_setuser_user",
        seen == "USER=user" and terminal_messages(user) == EXIT_0,
        seen,
        "USER=user",
    )
    bash = await execute(scenario, runner, '[[ 1 == 1 ]] && echo "bash=$BASH_VERSION"')
    seen = output(bash, "stdout").strip()
    scenario.check(
        "execution_runs_in_bash",
        seen.startswith("bash=") and len(seen) > len("bash=") and terminal_messages(bash) == EXIT_0,
        seen or terminal_messages(bash),
        "bash=<version>",
    )
    tty = await execute(scenario, runner, "test -t 0 && test -t 1")
    scenario.check(
        "execution_on_a_terminal", terminal_messages(tty) == EXIT_0, terminal_messages(tty), EXIT_0
    )
    apart = await execute(scenario, runner, "echo out; echo err >&2")
    stdout, stderr = output(apart, "stdout"), output(apart, "stderr")
    scenario.check(
        "stderr_apart_from_stdout",
        "err" not in stdout
        and "out" in stdout
        and stderr.strip() == "err"
        and terminal_messages(apart) == EXIT_0,
        {"stdout": stdout, "stderr": stderr},
        {"stdout": "out", "stderr": "err"},
    )
    privileged = await execute(scenario, runner, 'echo "USER=$USER"', privileged=True)
    seen = output(privileged, "stdout").strip()
    scenario.check(
        "privileged_execution_as_the_tasks_user",
        seen.startswith("USER=") and seen != "USER=user" and terminal_messages(privileged) == EXIT_0,
        seen,
        "not USER=user",
    )
    scenario.event("executions checked")


async def check_files(scenario: Scenario, runner: str) -> None:
    """``path=/`` lists the container's root for a privileged request; a download has its length."""
    files = f"/runners/{runner}/files"
    params = {"path": "/", "recursive": "false", "privilegedExecution": "true"}
    listing = await scenario.http.get(files, params=params)
    names = sorted(f["name"] for f in listing.json()["files"]) if listing.status_code == 200 else []
    scenario.check(
        "files_path_slash_lists_the_root",
        listing.status_code == 200 and "tmp" in names and "etc" in names,
        names[:8] if names else listing.status_code,
        "200 with tmp and etc",
    )
    content = bytes(range(256)) * 5 + b"parity"
    patch = {"copy": [{"path": "parity.bin", "content": base64.b64encode(content).decode()}]}
    (await scenario.http.patch(files, json=patch)).raise_for_status()
    lengths = {}
    for path in ("parity.bin", "/workspace/parity.bin"):  # CodeOcean downloads absolute paths
        download = await scenario.http.get(f"{files}/raw", params={"path": path})
        whole = download.status_code == 200 and download.content == content
        lengths[path] = download.headers.get("content-length") if whole else download.status_code
    scenario.check(
        "download_has_content_length",
        all(length == str(len(content)) for length in lengths.values()),
        lengths,
        len(content),
    )
    scenario.event("files checked")


async def image_of(scenario: Scenario) -> dict[str, str]:
    """The image each live runner job's allocation runs, from ``GET /sim/v1/state``."""
    async with httpx.AsyncClient(base_url=scenario.cluster.addresses[0], timeout=30) as sim:
        state = (await sim.get("/sim/v1/state")).json()
    allocs = scenario.cluster.state.allocs
    return {
        allocs[alloc_id].job_id: images.get("default-task", "")
        for alloc_id, images in state.get("images", {}).get("allocations", {}).items()
        if alloc_id in allocs
    }


def stale_runner(scenario: Scenario, runner_id: str, image: str | None) -> dict[str, Any]:
    """What explains a runner on an old image: its force_pull and its node."""
    state = scenario.cluster.state
    nodes = {a.node_id for a in state.allocs.values() if a.job_id == runner_id and not a.terminal}
    names = sorted(state.nodes[n].name if n in state.nodes else n for n in nodes)
    return {"image": image, "force_pull": force_pull(scenario, runner_id), "nodes": names}


async def push_image(scenario: Scenario, digest: str) -> str:
    """Move the image's tag to ``digest``; the digest it pointed to before."""
    async with httpx.AsyncClient(base_url=scenario.cluster.addresses[0], timeout=30) as sim:
        response = await sim.post("/sim/v1/images", json={"image": IMAGE, "digest": digest})
    scenario.check("image_tag_moved", response.status_code == 200, response.status_code, 200)
    return str(response.json().get("previous")) if response.status_code == 200 else ""


async def read_until(
    ws: trio_websocket.WebSocketConnection, messages: list[dict[str, Any]], text: str
) -> None:
    """Read the execution's messages until its stdout holds ``text`` (or it ended)."""
    with trio.move_on_after(WITHIN):
        while text not in output(messages, "stdout") and not terminal_messages(messages):
            messages.append(json.loads(await ws.get_message()))


async def check_rollout(scenario: Scenario, held: str, pool_size: int) -> None:
    """Move the image's tag, PUT the identical environment: idle runners roll out at once, the held
    one when given back, never under its running execution."""
    pool = scenario.service.pool
    repository = IMAGE.rsplit(":", 1)[0]
    new_digest = "sha256:" + hashlib.sha256(f"rebuilt-{scenario.seed}".encode()).hexdigest()
    response = await scenario.http.post(
        f"/runners/{held}/execute",
        json={"command": 'echo "img=$SIMULATED_IMAGE"; read go; echo "end=$SIMULATED_IMAGE"'},
    )
    response.raise_for_status()
    messages: list[dict[str, Any]] = []
    start = round(time.monotonic() - scenario.started, 3)
    async with trio_websocket.open_websocket_url(response.json()["websocketUrl"]) as ws:
        await read_until(ws, messages, "\n")
        before = word_after(output(messages, "stdout"), "img=")
        old_idle = {r for r in pool.runners if r != held}
        old = f"{repository}@{await push_image(scenario, new_digest)}"
        scenario.check("held_runner_ran_the_old_digest", before == old, before, old)
        status = await put_environment(
            scenario, ENVIRONMENT_ID, {**ENVIRONMENT, "prewarmingPoolSize": pool_size}
        )
        scenario.event("image pushed, environment put again", status=status)

        def rolled_out() -> bool:
            return not old_idle & set(pool.runners) and idle_of(scenario, ENVIRONMENT_ID) == pool_size

        took = await scenario.wait_for(rolled_out, within=WITHIN)
        scenario.check("identical_put_replaced_every_idle_runner_s", took is not None, took, WITHIN)
        scenario.event("idle runners rolled out", runners=idle_of(scenario, ENVIRONMENT_ID))
        new = f"{repository}@{new_digest}"
        images = await image_of(scenario)
        idle = [r for r in pool.runners if r != held]
        pulls = sorted({force_pull(scenario, r) for r in idle})
        scenario.check("rolled_out_runners_force_pull", pulls == [True], pulls, [True])
        wrong = {r: images.get(r) for r in idle if images.get(r) != new}
        scenario.check(
            "new_runners_run_the_new_digest", not wrong and len(idle) == pool_size, wrong or len(idle), new
        )
        seen = []
        for _ in range(min(2, pool_size)):
            runner = await scenario.claim()
            echoed = await execute(scenario, runner, 'echo "img=$SIMULATED_IMAGE"')
            seen.append(output(echoed, "stdout").strip().removeprefix("img="))
            (await scenario.http.delete(f"/runners/{runner}")).raise_for_status()
        scenario.check(
            "claimed_new_runners_see_the_new_digest", bool(seen) and all(s == new for s in seen), seen, new
        )
        running = held in pool.runners and not terminal_messages(messages) and images.get(held) == old
        scenario.check("held_runner_kept_under_its_execution", running, running, True)
        await ws.send_message("go\n")
        scenario.event("held runner's execution let go")
        try:
            while True:
                messages.append(json.loads(await ws.get_message()))
        except trio_websocket.ConnectionClosed:
            pass
    after = word_after(output(messages, "stdout"), "end=")
    scenario.check(
        "held_execution_ran_to_its_end_on_the_old_digest",
        after == old and terminal_messages(messages) == EXIT_0,
        {"image": after, "end": terminal_messages(messages)},
        {"image": old, "end": EXIT_0},
    )
    (await scenario.http.delete(f"/runners/{held}")).raise_for_status()
    end = terminal_messages(messages)
    outcome = str(end[-1]["type"]) if end else "closed"
    scenario.lives.append(
        {"start": start, "end": round(time.monotonic() - scenario.started, 3), "outcome": outcome}
    )
    scenario.event("held runner given back", end=end)
    gone = await scenario.wait_for(
        lambda: held not in pool.runners and held not in live_runner_jobs(scenario, ENVIRONMENT_ID),
        within=WITHIN,
    )
    scenario.check("held_runner_gone_once_given_back_s", gone is not None, gone, WITHIN)

    def settled() -> bool:
        runners = {r for r in pool.runners if pool.runners[r].environment_id == ENVIRONMENT_ID}
        return (
            idle_of(scenario, ENVIRONMENT_ID) == pool_size
            and live_runner_jobs(scenario, ENVIRONMENT_ID) == runners
        )

    await scenario.wait_for(settled, within=WITHIN)
    images = await image_of(scenario)
    runners = live_runner_jobs(scenario, ENVIRONMENT_ID)
    stale = {r: stale_runner(scenario, r, images.get(r)) for r in runners if images.get(r) != new}
    scenario.check(
        "every_runner_runs_the_new_digest_after",
        not stale and len(runners) == pool_size,
        stale or len(runners),
        new,
    )
    scenario.event("rolled out", runners=len(runners))


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05)
    size = max(3, args.runners)
    async with open_scenario("poseidon_parity", args.seed, config) as scenario:
        warm = await scenario.create_environment(size)
        scenario.check("pool_warm_s", warm is not None, warm, WITHIN)
        scenario.event("pool warm", runners=size)
        await check_runner_job(scenario, size)
        await check_network(scenario)
        stale_possible = not pulled_on_every_node(scenario, ENVIRONMENT_ID)
        held, replacement = await claim_with_replacement(scenario)
        scenario.event("runner held")
        pulls = None
        if replacement is not None:
            pulls = docker_config(scenario, replacement).get("force_pull")
        scenario.check(
            "claim_replacement_pulls_only_where_a_node_may_be_stale",
            pulls is stale_possible,
            pulls,
            stale_possible,
        )
        worker, _ = await claim_with_replacement(scenario)
        await check_execution(scenario, worker)
        await check_files(scenario, worker)
        (await scenario.http.delete(f"/runners/{worker}")).raise_for_status()
        await scenario.wait_for(lambda: idle_of(scenario, ENVIRONMENT_ID) == size, within=WITHIN)
        await check_rollout(scenario, held, size)
        await scenario.check_no_leaked_jobs()
        return scenario.report(args.report, args.plot)


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=4))
