"""The runner job's template file against the simulated cluster: the daemon builds its runners from
a JSON template, rolls an environment out on an identical PUT, and stops at once, naming the file,
when the template cannot carry a runner. (HCL templates need the cluster's /v1/jobs/parse.)"""

from __future__ import annotations

import copy
from pathlib import Path

import httpx
import orjson
import trio

from supervisor.core.config import NomadSection, ServerSettings, Settings
from supervisor.core.job_template import POSEIDON_TEMPLATE
from supervisor.simulator import SimConfig, SimulatedCluster
from supervisor.tree.daemon import Daemon

from ..waiting import wait_until
from .conftest import ENVIRONMENT


async def test_runners_are_built_from_the_template_file_and_an_identical_put_rolls_them_out(
    nursery: trio.Nursery, sim_config: SimConfig, tmp_path: Path
) -> None:
    template = copy.deepcopy(dict(POSEIDON_TEMPLATE))
    template["Meta"] = {"team": "edu"}
    template["TaskGroups"][0]["EphemeralDisk"]["SizeMB"] = 20
    path = tmp_path / "runner.json"
    path.write_bytes(orjson.dumps({"Job": template}))
    settings = Settings(server=ServerSettings(port=0), nomad=NomadSection(job_template=str(path)))
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    daemon = await nursery.start(Daemon(settings, environ={"NOMAD_ADDR": cluster.addresses[0]}).run)
    assert daemon.service is not None
    put = {**ENVIRONMENT, "networkAccess": True}
    async with httpx.AsyncClient(base_url=daemon.addresses[0] + "/api/v1", timeout=30) as http:
        assert (await http.put("/execution-environments/10", json=put)).status_code == 201
        pool = daemon.service.pool
        await wait_until(lambda: getattr(pool.stats().get(10), "idle", 0) == 2, within=20)
        first = set(pool.runners)
        spec = cluster.state.jobs[("default", next(iter(first)))].spec
        assert spec["Meta"]["team"] == "edu"
        group = spec["TaskGroups"][0]
        assert group["EphemeralDisk"]["SizeMB"] == 20
        assert group["Networks"][0]["Mode"] == "bridge"
        assert group["Tasks"][0]["Config"]["force_pull"] is True
        assert (await http.put("/execution-environments/10", json=put)).status_code == 204
        await wait_until(
            lambda: not first & set(pool.runners) and getattr(pool.stats().get(10), "idle", 0) == 2, within=20
        )
    daemon.stop()


async def test_a_template_that_cannot_carry_a_runner_stops_the_daemon_naming_it(
    nursery: trio.Nursery, sim_config: SimConfig, tmp_path: Path
) -> None:
    path = tmp_path / "runner.json"
    task = {"Name": "default-task", "Driver": "raw_exec"}
    path.write_bytes(orjson.dumps({"TaskGroups": [{"Name": "default-group", "Tasks": [task]}]}))
    settings = Settings(server=ServerSettings(port=0), nomad=NomadSection(job_template=str(path)))
    cluster = await nursery.start(SimulatedCluster(sim_config).run)
    daemon = Daemon(settings, environ={"NOMAD_ADDR": cluster.addresses[0]})
    with trio.fail_after(20):
        await nursery.start(daemon.run)
        await daemon.ended.wait()
    assert daemon.configuration_error is not None
    assert daemon.configuration_error.startswith(f"nomad.job_template {path}: ")
    assert "runs the driver 'raw_exec'; runners need docker" in daemon.configuration_error
    assert daemon.service is None, "no term started"
