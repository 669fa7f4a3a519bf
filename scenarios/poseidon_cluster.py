"""A cluster as Poseidon leaves it, written through Nomad's HTTP API as Poseidon writes it.

Poseidon registers each environment's ``template-<id>`` job and fills its pool with runner jobs
that pull their image (``force_pull``). When CodeOcean claims a runner, Poseidon reads its job
back from Nomad, registers it again with ``used`` and the claim's timeout in the meta of its group
``config`` (``APIClient.SetRunnerMetaUsed``) and registers a replacement that does not pull. A file
copy (``NomadJob.UpdateFileSystem``) is a tar piped into a privileged exec of ``tar --extract``,
the command wrapped as ``APIClient.ExecuteCommand`` wraps it (without its timing markers, which
only feed Sentry).
"""

from __future__ import annotations

import io
import random
import re
import tarfile
import uuid
from collections.abc import Mapping
from typing import Any, Final

import httpx
import trio

from supervisor.core.job_template import RUNNER_TASK
from supervisor.dst.poseidon_jobs import claimed_by_poseidon, poseidon_runner_job, poseidon_template_job
from supervisor.nomad import NomadClient
from supervisor.nomad.exec import ExecExited
from supervisor.simulator import SimulatedCluster

__all__ = [
    "PoseidonCluster",
    "created_environment",
    "environments_of",
    "live_runner_jobs",
    "poseidon_copy_command",
]

# Poseidon's ``dto.UpdateFileSystemRequest`` without deletions: the tar's entries, extracted.
_COPY: Final = "tar --extract --absolute-names --verbose --file=/dev/stdin;"
# CodeOcean's claims under Poseidon: long enough to outlive the scenario, and not all alike.
CLAIM_TIMEOUTS: Final = (300, 600, 900)


def environments_of(runners: int, *, quick: bool) -> list[dict[str, Any]]:
    """The environments Poseidon held, as CodeOcean put them (Poseidon's ExecutionEnvironment JSON):
    offline and networked, the first of ``runners`` idle runners, the others fewer."""

    def environment(
        environment_id: int, image: str, pool: int, network: bool, ports: list[int]
    ) -> dict[str, Any]:
        return {
            "id": environment_id,
            "image": image,
            "prewarmingPoolSize": max(1, pool),
            "cpuLimit": 20,
            "memoryLimit": 256,
            "networkAccess": network,
            "exposedPorts": ports,
        }

    chosen = [
        environment(21, "openhpi/co_execenv_python:3.8", runners, False, []),
        environment(22, "openhpi/co_execenv_node:0.1", runners // 2, True, [3000, 8080]),
    ]
    if not quick:
        chosen += [
            environment(23, "openhpi/co_execenv_java:17", runners // 4, False, []),
            environment(24, "openhpi/co_execenv_ruby:3.2", runners // 8, True, []),
        ]
    return chosen


def created_environment(*, quick: bool) -> dict[str, Any]:
    """The environment CodeOcean puts once the daemon serves: its template is the daemon's."""
    pool = 1 if quick else 3
    return {
        "id": 29,
        "image": "openhpi/co_execenv_python:3.12",
        "prewarmingPoolSize": pool,
        "cpuLimit": 40,
        "memoryLimit": 512,
        "networkAccess": True,
        "exposedPorts": [4000],
    }


def held_count(environment: Mapping[str, Any]) -> int:
    """How many runners CodeOcean holds in ``environment`` when Poseidon stops."""
    return max(1, int(environment["prewarmingPoolSize"]) // 4)


def live_runner_jobs(cluster: SimulatedCluster, environment_id: int | None = None) -> set[str]:
    """The runner jobs (``<id>-<uuid>``) Nomad holds and that are not stopped."""
    pattern = re.compile(rf"{environment_id if environment_id is not None else '[0-9]+'}-")
    return {
        job_id for (_, job_id), job in cluster.state.jobs.items() if pattern.match(job_id) and not job.stop
    }


def _go_quoted(command: str) -> str:
    """``dto.BashEscapeCommand``: Go's ``%q`` (for the text these commands hold: backslashes and
    quotes escaped) with ``$`` and backquotes escaped as well."""
    escaped = command.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("$", "\\$").replace("`", "\\`") + '"'


def _wrapped(command: str) -> str:
    """``dto.WrapBashCommand``."""
    return "/bin/bash -c " + _go_quoted(command)


def poseidon_copy_command() -> list[str]:
    """The argv of Poseidon's file copy: ``ExecutionRequest.FullCommand`` (``env CODEOCEAN=true``),
    privileged (no ``/sbin/setuser``), Nomad's variables unset, all under ``/bin/bash -c``."""
    full = "env CODEOCEAN=true " + _wrapped(_COPY)
    return ["/bin/bash", "-c", "unset ${!NOMAD_@} && " + _wrapped(_wrapped(full))]


def poseidon_tar(files: Mapping[str, bytes]) -> bytes:
    """``createTarArchiveForFiles``: a directory (path ending in ``/``) of mode 1777, a file of 0744."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path, content in files.items():
            entry = tarfile.TarInfo(path.rstrip("/"))
            if path.endswith("/"):
                entry.type, entry.mode = tarfile.DIRTYPE, 0o1777
                tar.addfile(entry)
            else:
                entry.mode, entry.size = 0o744, len(content)
                tar.addfile(entry, io.BytesIO(content))
    return buffer.getvalue()


class PoseidonCluster:
    """Poseidon's writes to the cluster, over HTTP with the deployment's token; what it left is
    kept for the checks: its idle runners, and each held runner's files and allocation."""

    def __init__(self, address: str, token: str, nomad: NomadClient) -> None:
        self.http = httpx.AsyncClient(base_url=address, headers={"X-Nomad-Token": token}, timeout=30)
        self.nomad = nomad
        self.idle_runners: set[str] = set()
        self.held_files: dict[str, dict[str, bytes]] = {}
        self.held_allocations: dict[str, str] = {}

    async def __aenter__(self) -> PoseidonCluster:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.http.aclose()

    async def register(self, job: Mapping[str, Any]) -> None:
        """``Jobs().Register``: a PUT of the job to ``/v1/jobs``."""
        (await self.http.put("/v1/jobs", json={"Job": job})).raise_for_status()

    async def running_allocations(self, job_id: str) -> list[str]:
        response = await self.http.get(f"/v1/job/{job_id}/allocations")
        response.raise_for_status()
        return [a["ID"] for a in response.json() if a["ClientStatus"] == "running"]

    async def template(self, environment_id: int) -> tuple[dict[str, Any] | None, str]:
        """The template job as Nomad answers it, and its status (None, "absent" if there is none)."""
        response = await self.http.get(f"/v1/job/template-{environment_id}")
        if response.status_code == 404:
            return None, "absent"
        response.raise_for_status()
        job: dict[str, Any] = response.json()
        return job, str(job.get("Status"))

    async def wait_running(self, job_ids: list[str], within: float = 60.0) -> None:
        with trio.fail_after(within):
            for job_id in job_ids:
                while not await self.running_allocations(job_id):
                    await trio.sleep(0.05)

    async def leave(self, environments: list[dict[str, Any]], *, seed: int) -> None:
        """Every environment with its pool full, its held runners claimed and written to; returns
        once every runner runs."""
        rng = random.Random(seed)

        def runner_id(environment: Mapping[str, Any]) -> str:
            return f"{environment['id']}-{uuid.UUID(int=rng.getrandbits(128), version=4)}"

        filled: dict[int, list[str]] = {}
        for environment in environments:
            await self.register(poseidon_template_job(environment))
            size = int(environment["prewarmingPoolSize"]) + held_count(environment)
            filled[environment["id"]] = [runner_id(environment) for _ in range(size)]
            for runner in filled[environment["id"]]:
                await self.register(poseidon_runner_job(environment, runner.split("-", 1)[1]))
        await self.wait_running([r for runners in filled.values() for r in runners])
        replacements: list[str] = []
        for environment in environments:
            runners = filled[environment["id"]]
            held, idle = runners[: held_count(environment)], runners[held_count(environment) :]
            self.idle_runners.update(idle)
            for index, runner in enumerate(held):
                await self.claim(runner, CLAIM_TIMEOUTS[index % len(CLAIM_TIMEOUTS)])
                replacement = runner_id(environment)
                await self.register(
                    poseidon_runner_job(environment, replacement.split("-", 1)[1], force_pull=False)
                )
                replacements.append(replacement)
                files = {
                    "main.py": f"print('written under Poseidon in {runner}')\n".encode(),
                    "data/": b"",
                    "data/input.txt": f"input of {runner}\n".encode(),
                }
                await self.copy(runner, files)
                self.held_files[runner] = {p: c for p, c in files.items() if not p.endswith("/")}
        await self.wait_running(replacements)
        self.idle_runners.update(replacements)

    async def claim(self, runner: str, seconds: int) -> None:
        """``SetRunnerMetaUsed``: the job read back and registered again, marked used."""
        response = await self.http.get(f"/v1/job/{runner}")
        response.raise_for_status()
        await self.register(claimed_by_poseidon(response.json(), seconds))
        (allocation,) = await self.running_allocations(runner)
        self.held_allocations[runner] = allocation

    async def copy(self, runner: str, files: Mapping[str, bytes]) -> None:
        """``UpdateFileSystem``: the tar on the exec's stdin; anything but exit 0 stops the scenario."""
        allocation = self.held_allocations[runner]
        async with self.nomad.open_exec(
            allocation, task=RUNNER_TASK, command=poseidon_copy_command()
        ) as session:
            await session.send_stdin(poseidon_tar(files))
            await session.close_stdin()
            exited, _, stderr = await session.wait_exit()
        if not isinstance(exited, ExecExited) or exited.exit_code != 0:
            raise RuntimeError(f"Poseidon's copy into {runner} failed: {exited}, {stderr[:200]!r}")
