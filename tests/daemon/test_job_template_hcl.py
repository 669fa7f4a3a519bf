"""HCL job templates end to end: the daemon has the simulated cluster's /v1/jobs/parse read Poseidon's
own default template file, and an operator's template for another datacenter with a constraint,
and builds its runners from what Nomad answers; a template Nomad refuses stops the daemon in one
line and fails ``supervisor check``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from supervisor.core.config import NomadSection, ServerSettings, Settings
from supervisor.ops.check import run_checks
from supervisor.ops.check_result import Status
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

from ..waiting import wait_until
from .conftest import ENVIRONMENT

POSEIDON_HCL = Path(__file__).parents[1] / "fixtures" / "poseidon-template-environment-job.hcl"

OTHER_DATACENTER = """
job "template-0" {
  datacenters = ["dc2"]
  type = "batch"
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  group "default-group" {
    ephemeral_disk {
      size = 25
    }
    task "default-task" {
      driver = "docker"
      config {
        image   = "openhpi/docker_exec_phusion"
        command = "sleep"
        args    = ["infinity"]
        security_opt = ["no-new-privileges"]
      }
      logs {
        max_files     = 2
        max_file_size = 5
      }
      resources {
        cpu    = 40
        memory = 50
      }
    }
  }
}
"""

REFUSED = """
job "template-0" {
  type = "batch"
  group "default-group" {
    colour = "blue"
  }
}
"""


async def _daemon_with(
    nursery: trio.Nursery, config: SimConfig, template: Path
) -> tuple[SimulatedCluster, Daemon]:
    settings = Settings(server=ServerSettings(port=0), nomad=NomadSection(job_template=str(template)))
    cluster = await nursery.start(SimulatedCluster(config).run)
    daemon = await nursery.start(Daemon(settings, environ={"NOMAD_ADDR": cluster.addresses[0]}).run)
    return cluster, daemon


async def _warm_runner_spec(cluster: SimulatedCluster, daemon: Daemon) -> dict[str, Any]:
    assert daemon.service is not None
    async with httpx.AsyncClient(base_url=daemon.addresses[0] + "/api/v1", timeout=30) as http:
        assert (await http.put("/execution-environments/10", json=ENVIRONMENT)).status_code == 201
    pool = daemon.service.pool
    await wait_until(
        lambda: getattr(pool.stats().get(10), "idle", 0) == ENVIRONMENT["prewarmingPoolSize"], within=30
    )
    spec: dict[str, Any] = cluster.state.jobs[("default", next(iter(pool.runners)))].spec
    return spec


async def test_poseidons_own_template_file_gives_poseidons_runner_job(
    nursery: trio.Nursery, sim_config: SimConfig
) -> None:
    cluster, daemon = await _daemon_with(nursery, sim_config, POSEIDON_HCL)
    spec = await _warm_runner_spec(cluster, daemon)
    group, claim = spec["TaskGroups"]
    assert (spec["Type"], spec["Datacenters"]) == ("batch", ["dc1"])
    assert group["Name"] == "default-group"
    assert claim["Name"] == "config"
    assert group["EphemeralDisk"]["SizeMB"] == 10
    assert group["Spreads"][0]["Attribute"] == "${node.unique.name}"
    assert group["Spreads"][0]["Weight"] == 100
    task = group["Tasks"][0]
    assert (task["LogConfig"]["MaxFiles"], task["LogConfig"]["MaxFileSizeMB"]) == (1, 1)
    assert task["Config"]["image"] == ENVIRONMENT["image"], "the environment's image, not the template's"
    assert task["Config"]["network_mode"] == "none"
    assert task["Config"]["force_pull"] is True, "a pool's fill pulls, as Poseidon's does"
    daemon.stop()


async def test_a_template_for_another_datacenter_with_a_constraint_places_runners_there(
    nursery: trio.Nursery, sim_config: SimConfig, tmp_path: Path
) -> None:
    template = tmp_path / "runner.hcl"
    template.write_text(OTHER_DATACENTER)
    cluster, daemon = await _daemon_with(nursery, attrs.evolve(sim_config, datacenter="dc2"), template)
    spec = await _warm_runner_spec(cluster, daemon)
    assert spec["Datacenters"] == ["dc2"]
    assert {"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}.items() <= spec[
        "Constraints"
    ][0].items()
    group = spec["TaskGroups"][0]
    assert group["EphemeralDisk"]["SizeMB"] == 25
    assert group["Tasks"][0]["Config"]["security_opt"] == ["no-new-privileges"]
    daemon.stop()


async def test_a_template_nomad_refuses_stops_the_daemon_in_one_line_and_fails_the_check(
    nursery: trio.Nursery, sim_config: SimConfig, tmp_path: Path
) -> None:
    template = tmp_path / "runner.hcl"
    template.write_text(REFUSED)
    settings = Settings(server=ServerSettings(port=0), nomad=NomadSection(job_template=str(template)))
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    environ = {"NOMAD_ADDR": cluster.addresses[0]}
    daemon = Daemon(settings, environ=environ)
    with trio.fail_after(30):
        await nursery.start(daemon.run)
        await daemon.ended.wait()
    error = daemon.configuration_error
    assert error is not None
    assert "\n" not in error
    assert error.startswith(f"nomad.job_template {template}: ")
    assert 'An argument named "colour" is not expected here' in error
    nomad = settings.nomad_settings(environ)
    assert nomad is not None
    results = await run_checks(settings, nomad, path=None, environ=environ, report=lambda _: None)
    failed = [r for r in results if r.status is Status.FAIL]
    assert failed
    assert 'An argument named "colour" is not expected here' in failed[0].detail
