"""Poseidon stops and the daemon starts in its place, on the cluster Poseidon left: no outage.

    python scenarios/poseidon_switchover.py [--quick] [--runners N] [--seed S] [--report FILE]
                                            [--plot FILE.svg]

The cluster is left as Poseidon leaves it, written through Nomad's HTTP API as Poseidon writes it
(``poseidon_cluster.py``): environments offline and networked, of different pool sizes (the first
``--runners``, the others a half, a quarter and an eighth of it; ``--quick``: the first two), each a
``template-<id>`` job with its idle runners (``force_pull``, as a pool fill writes them) and runners
claimed by CodeOcean (Poseidon's claim: the job read back and registered with ``used`` and a timeout
in its ``config`` meta, and a replacement that does not pull), files copied into the held runners as
Poseidon copies them (a tar piped into a privileged exec). ACLs are on. Then ``supervisor run``
starts with nothing set but ``NOMAD_ADDR`` and ``NOMAD_TOKEN``, and CodeOcean's calls come as soon
as its port answers: first the list of environments, then all at once: on every held runner, list
its files, download one, copy one, execute (WebSocket), give it back; on every environment, clients
claim, copy, execute and give back; the list again; and a new environment put, whose users come once
its pool is warm. Invariants: no request fails (no 4xx or 5xx, every execution its one terminal
message, exit 0 with the output its files make); every held runner answers with Poseidon's files on
the allocation it had; no idle runner Poseidon made is gone without being handed out; every pool is
at strength within 10 s of the load's end; the environments are listed with Poseidon's values; no
runner job leaks; Poseidon's loader takes every template job the daemon left (the way back).
"""

from __future__ import annotations

import argparse
import base64
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import httpx
import trio
import trio_websocket
from harness import EXIT_0, Scenario, daemon_logs, parse_arguments, run, start_daemon, terminal_messages
from poseidon_cluster import PoseidonCluster, created_environment, environments_of, live_runner_jobs

from supervisor.dst.poseidon_jobs import poseidon_loads
from supervisor.nomad import NomadClient, NomadSettings
from supervisor.simulator import SimConfig, SimulatedCluster

# A management token, as a deployment gives both Poseidon and the daemon.
TOKEN: Final = "4f8a2c1e-9b7d-4e3a-8c5f-0d6b1a2e3f47"
REFILL_BOUND: Final = 10.0
# CodeOcean's claim: the runner is given back after this long without a request.
INACTIVITY_TIMEOUT: Final = 120


class CodeOcean:
    """CodeOcean's calls against the daemon; every answer of 400 or more, and every call that got
    no answer, is a failed request."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.requests = 0
        self.failures: list[str] = []
        self.handed_out: set[str] = set()

    async def call(self, method: str, path: str, **options: Any) -> httpx.Response | None:
        self.requests += 1
        try:
            response = await self.scenario.http.request(method, path, **options)
        except httpx.HTTPError as exc:
            self.failures.append(f"{method} {path}: {exc!r}")
            return None
        if response.status_code >= 400:
            self.failures.append(f"{method} {path}: {response.status_code} {response.text[:160]}")
            return None
        return response

    def fail(self, what: str) -> None:
        self.failures.append(what)

    async def claim(self, environment_id: int) -> str | None:
        body = {"executionEnvironmentId": environment_id, "inactivityTimeout": INACTIVITY_TIMEOUT}
        response = await self.call("POST", "/runners", json=body)
        if response is None:
            return None
        runner = str(response.json()["runnerId"])
        self.handed_out.add(runner)
        return runner

    async def copy(self, runner: str, path: str, content: bytes) -> bool:
        body = {"copy": [{"path": path, "content": base64.b64encode(content).decode()}]}
        return await self.call("PATCH", f"/runners/{runner}/files", json=body) is not None

    async def execute(self, runner: str, command: str, expected: list[str]) -> bool:
        """Run ``command``; it must end with exit 0 alone and print each of ``expected``."""
        body = {"command": command, "timeLimit": 30, "privilegedExecution": False, "environment": {}}
        response = await self.call("POST", f"/runners/{runner}/execute", json=body)
        if response is None:
            return False
        self.requests += 1
        try:
            messages = await self.scenario.read_execution(response.json()["websocketUrl"])
        except (trio_websocket.HandshakeError, OSError) as exc:
            self.fail(f"WebSocket of {runner}: {exc!r}")
            return False
        ends = terminal_messages(messages)
        stdout = "".join(str(m["data"]) for m in messages if m["type"] == "stdout")
        missing = [text for text in expected if text not in stdout]
        if ends != EXIT_0 or missing:
            self.fail(f"execution in {runner}: ends {ends}, missing {missing}, stdout {stdout[:160]!r}")
            return False
        return True

    async def release(self, runner: str) -> bool:
        return await self.call("DELETE", f"/runners/{runner}") is not None


async def use_held_runner(
    load: CodeOcean, nomad: PoseidonCluster, runner: str, files: Mapping[str, bytes], kept: dict[str, bool]
) -> None:
    """A runner CodeOcean held under Poseidon: its files are there, it takes a file and runs a
    command on the allocation it had; then it is given back."""
    listing = await load.call("GET", f"/runners/{runner}/files", params={"recursive": "true"})
    if listing is not None:
        names = {entry["name"] for entry in listing.json()["files"]}
        missing = sorted(f"./{path}" for path in files if f"./{path}" not in names)
        if missing:
            load.fail(f"files of {runner}: {missing} not listed in {sorted(names)}")
    first = sorted(files)[0]
    download = await load.call("GET", f"/runners/{runner}/files/raw", params={"path": first})
    if download is not None and download.content != files[first]:
        load.fail(f"download of {first} from {runner}: {download.content[:80]!r}")
    added = f"added under the daemon in {runner}\n".encode()
    await load.copy(runner, "added.txt", added)
    expected = [content.decode().strip() for content in files.values()] + [added.decode().strip()]
    ran = await load.execute(runner, f"cat {' '.join(sorted(files))} added.txt", expected)
    allocations = await nomad.running_allocations(runner)
    if allocations != [nomad.held_allocations[runner]]:
        load.fail(f"{runner} runs {allocations}, not {nomad.held_allocations[runner]} it ran under Poseidon")
    kept[runner] = ran and allocations == [nomad.held_allocations[runner]]
    await load.release(runner)


async def new_work(load: CodeOcean, environment_id: int, cycles: int) -> None:
    """One CodeOcean user: claim, copy, execute, give back, ``cycles`` times."""
    for cycle in range(cycles):
        runner = await load.claim(environment_id)
        if runner is None:
            continue
        text = f"submission {cycle} in {runner}"
        if await load.copy(runner, "main.txt", text.encode()):
            await load.execute(runner, "cat main.txt", [text])
        await load.release(runner)


async def sample(scenario: Scenario) -> None:
    """The pools' idle and used runners every 0.2 s, as the daemon's statistics give them."""
    while True:
        try:
            stats = (await scenario.http.get("/statistics/execution-environments")).json()
        except (httpx.HTTPError, ValueError):
            stats = {}
        scenario.samples.append(
            {
                "t": round(time.monotonic() - scenario.started, 3),
                "idle": sum(int(s.get("idleRunners", 0)) for s in stats.values()),
                "used": sum(int(s.get("usedRunners", 0)) for s in stats.values()),
                "stream": "up",
            }
        )
        await trio.sleep(0.2)


async def main(args: argparse.Namespace) -> bool:
    config = SimConfig(seed=args.seed, servers=3, nodes=3, alloc_start_delay=0.05, acl_token=TOKEN)
    with daemon_logs("poseidon-switchover-") as kept:
        async with trio.open_nursery() as nursery:
            cluster = await nursery.start(SimulatedCluster(config).run)
            settings = NomadSettings(addresses=tuple(cluster.addresses), token=TOKEN)
            async with NomadClient(settings) as nomad:
                ok = await play(cluster, nomad, kept.path, args)
            nursery.cancel_scope.cancel("scenario over")
        kept.ok = ok
    return ok


async def play(cluster: SimulatedCluster, nomad: NomadClient, logs: Path, args: argparse.Namespace) -> bool:
    environments = environments_of(args.runners, quick=args.quick)
    poseidon = PoseidonCluster(cluster.addresses[0], TOKEN, nomad)
    started = time.monotonic()
    async with poseidon:
        await poseidon.leave(environments, seed=args.seed)
        left_s = round(time.monotonic() - started, 3)
        starting = time.monotonic()
        daemon, api = await start_daemon(cluster, logs / "daemon.log", {"NOMAD_TOKEN": TOKEN})
        serving_s = round(time.monotonic() - starting, 3)
        async with httpx.AsyncClient(base_url=api, timeout=30) as http:
            scenario = Scenario("poseidon_switchover", args.seed, cluster, None, http, nomad)
            scenario.event("cluster left as Poseidon leaves it", seconds=left_s)
            scenario.event("daemon serving", seconds=serving_s)
            ok = await switch_over(scenario, poseidon, environments, args)
        daemon.terminate()
        with trio.move_on_after(30):  # twice the graceful stop
            await daemon.wait()
        if daemon.returncode is None:
            daemon.kill()
            await daemon.wait()
    return ok


async def switch_over(
    scenario: Scenario,
    poseidon: PoseidonCluster,
    environments: list[dict[str, Any]],
    args: argparse.Namespace,
) -> bool:
    """CodeOcean's calls at once, then the pools' refill; judged by ``judge``."""
    load = CodeOcean(scenario)
    held_kept: dict[str, bool] = {}
    listings: list[dict[str, Any]] = []
    cycles = 1 if args.quick else 2
    created = created_environment(quick=args.quick)
    every = [*environments, created]

    async def list_environments() -> None:
        response = await load.call("GET", "/execution-environments")
        listed = response.json()["executionEnvironments"] if response is not None else []
        listings.append({str(e["id"]): e for e in listed})

    async def create_and_use() -> None:
        """CodeOcean puts an environment of its own: the daemon writes its template job. Its
        learners come once its pool is warm (a claim before gets Poseidon's 500 NOMAD_OVERLOAD)."""
        body = {k: v for k, v in created.items() if k != "id"}
        if await load.call("PUT", f"/execution-environments/{created['id']}", json=body) is not None:
            warm = await wait_async(lambda: pool_warm(scenario, created), within=REFILL_BOUND)
            scenario.event("created environment warm", seconds=warm)
            async with trio.open_nursery() as users:
                for _ in range(created["prewarmingPoolSize"]):
                    users.start_soon(new_work, load, created["id"], cycles)

    load_started = time.monotonic()
    # The first call as the port answers is a list of the environments; then the rest at once.
    await list_environments()
    async with trio.open_nursery() as outer:
        outer.start_soon(sample, scenario)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(list_environments)
            nursery.start_soon(create_and_use)
            for runner, files in poseidon.held_files.items():
                nursery.start_soon(use_held_runner, load, poseidon, runner, files, held_kept)
            for environment in environments:
                for _ in range(environment["prewarmingPoolSize"]):
                    nursery.start_soon(new_work, load, environment["id"], cycles)
        load_s = round(time.monotonic() - load_started, 3)
        scenario.event("load over", requests=load.requests, seconds=load_s)

        async def at_strength() -> bool:
            return all([await pool_warm(scenario, e, idle_only=True) for e in every])

        refill = await wait_async(at_strength, within=REFILL_BOUND + 20)
        scenario.event("pools at strength" if refill is not None else "pools still short", seconds=refill)
        outer.cancel_scope.cancel("measured")

    scenario.check("failed_requests", not load.failures, load.failures[:5] or 0, 0)
    scenario.check("requests", load.requests > 0, load.requests, "> 0")
    usable = sum(held_kept.values())
    held = len(poseidon.held_files)
    scenario.check("held_runners_usable_on_their_allocation", usable == held, usable, held)
    live = live_runner_jobs(scenario.cluster)
    wasted = sorted(r for r in poseidon.idle_runners if r not in load.handed_out and r not in live)
    scenario.check("idle_runners_wasted", not wasted, wasted[:5] or 0, 0)
    scenario.check("pools_at_strength_s", refill is not None and refill <= REFILL_BOUND, refill, REFILL_BOUND)
    wrong = [
        {str(e["id"]): listed.get(str(e["id"])) for e in environments if listed.get(str(e["id"])) != e}
        for listed in listings
    ]
    scenario.check(
        "environments_listed_as_poseidon", not any(wrong), wrong if any(wrong) else "all", "Poseidon's values"
    )
    leaked = {
        e["id"]: extra
        for e in every
        if (extra := len(live_runner_jobs(scenario.cluster, e["id"])) - e["prewarmingPoolSize"])
    }
    scenario.check("leaked_runner_jobs", not leaked, leaked or 0, 0)
    refused = {}
    for environment in every:
        job, status = await poseidon.template(environment["id"])
        loaded = poseidon_loads(job, status) if job is not None else None
        if loaded != {**environment, "exposedPorts": environment["exposedPorts"] or None}:
            refused[f"template-{environment['id']}"] = loaded or status
    scenario.check("templates_poseidon_loads", not refused, refused or "all", "all, as put")
    figures = {
        "held_runners": held,
        "idle_runners": len(poseidon.idle_runners),
        "requests": load.requests,
        "load_s": load_s,
        "refill_s": refill,
        "total_s": round(time.monotonic() - scenario.started, 3),
    }
    scenario.event("figures", **figures)
    print("figures: " + ", ".join(f"{name} {value}" for name, value in figures.items()))
    return scenario.report(args.report, args.plot)


async def pool_warm(scenario: Scenario, environment: Mapping[str, Any], *, idle_only: bool = False) -> bool:
    """Whether the daemon's statistics give the environment its pool of idle runners (and, with
    ``idle_only``, no used one)."""
    stats = (await scenario.http.get("/statistics/execution-environments")).json().get(str(environment["id"]))
    if not stats or stats.get("idleRunners") != environment["prewarmingPoolSize"]:
        return False
    return not idle_only or stats.get("usedRunners") == 0


async def wait_async(condition: Callable[[], Awaitable[bool]], within: float) -> float | None:
    """Seconds until the awaited ``condition()`` held, or None if it did not within ``within``."""
    start = time.monotonic()
    with trio.move_on_after(within):
        while not await condition():
            await trio.sleep(0.1)
        return round(time.monotonic() - start, 3)
    return None


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="two small environments, one cycle each")


if __name__ == "__main__":
    run(main, parse_arguments(__doc__.splitlines()[0], default_runners=30, extra=_options))
