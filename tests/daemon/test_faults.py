"""What no retry mends is told at once: a token Nomad refuses makes health CRITICAL with the reason
and the remedy, an environment whose job Nomad refuses is the client's 400 with Nomad's word, and
an HA lock Nomad refuses stops the daemon in one line.

These run on the real clock (``conftest.py`` says why); each waits for a condition, never a time.
"""

from __future__ import annotations

import attrs
import pytest
import trio

from supervisor.base.levels import StreamState
from supervisor.core.config import HaSettings, HealthSettings, NomadSection, ServerSettings, Settings
from supervisor.ops.probe import probe
from supervisor.simulator import SimConfig
from supervisor.simulator.config import AclPolicy, AclToken
from supervisor.tree.daemon import Daemon

from .conftest import ENVIRONMENT, Harness

ROOT = "the-management-token"
ALL_BUT_VARIABLES = """
namespace "default" {
  policy       = "read"
  capabilities = ["submit-job", "alloc-exec", "alloc-lifecycle"]
}
node { policy = "read" }
"""
WITHOUT_VARIABLES = "no-variables-token"
SIM = SimConfig(
    seed=11,
    nodes=2,
    alloc_start_delay=0.01,
    task_kill_delay=0.01,
    eval_delay=0.001,
    acl_token=ROOT,
    acl_tokens=(AclToken(WITHOUT_VARIABLES, ("daemon",), name="daemon"),),
    acl_policies=(AclPolicy("daemon", ALL_BUT_VARIABLES),),
)


@pytest.mark.parametrize("sim_config", [SIM])
@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), nomad=NomadSection(token="wrong"))]
)
async def test_a_refused_token_is_critical_at_once_and_says_why(
    harness: Harness, sim_config: SimConfig, settings: Settings
) -> None:
    faults = harness.service.faults
    await harness.wait_for(lambda: bool(faults.active()), within=15)
    details = (await harness.http.get("/health/details")).json()
    assert details["status"] == "critical"
    (fault,) = details["checks"]["faults"]["faults"]
    assert fault["kind"] == "token_refused"
    assert "403 Permission denied" in fault["reason"]
    assert (
        "nomad.token (NOMAD_TOKEN) is missing, unknown to this cluster, or its policy lacks"
        in fault["remedy"]
    )
    url = harness.daemon.addresses[0]
    code, text = await trio.to_thread.run_sync(lambda: probe(url, token="", timeout=5, as_json=False))
    assert code == 2
    assert text.startswith("CRITICAL: Nomad refuses the daemon's token (403 Permission denied); ")
    metrics = (await harness.http.get(url + "/metrics")).text
    assert 'supervisor_permanent_faults{kind="token_refused"} 1' in metrics


async def test_an_environment_nomad_refuses_is_the_clients_400_with_nomads_word(harness: Harness) -> None:
    response = await harness.http.put("/execution-environments/10", json={**ENVIRONMENT, "memoryLimit": 5})
    assert response.status_code == 400
    message = response.json()["message"]
    assert message.startswith("Nomad refuses the job of execution environment 10: ")
    assert message.endswith("Task default-task validation failed: minimum MemoryMB value is 10; got 5")
    assert "\n" not in message
    assert (await harness.http.get("/execution-environments/10")).status_code == 404
    assert harness.cluster.state.jobs == {}, "nothing half-created"
    assert harness.service.faults.active() == [], "the client was told: nothing lasts"
    # A limit under the runner's usual reservation is taken: the reservation is lowered to it.
    assert (
        await harness.http.put("/execution-environments/11", json={**ENVIRONMENT, "memoryLimit": 20})
    ).status_code == 201
    await harness.wait_for(lambda: harness.idle(11) == 2)


async def test_an_ha_lock_nomad_refuses_stops_the_daemon_in_one_line(nursery: trio.Nursery) -> None:
    from supervisor.simulator import SimulatedCluster

    cluster = await nursery.start(SimulatedCluster(SIM).run)
    settings = Settings(
        server=ServerSettings(port=0),
        nomad=NomadSection(token=WITHOUT_VARIABLES),
        ha=HaSettings(enabled=True),
    )
    daemon = Daemon(settings, environ={"NOMAD_ADDR": ",".join(cluster.addresses)})
    with trio.fail_after(15):
        await daemon.run()
    assert daemon.failure is not None
    assert "\n" not in daemon.failure
    assert daemon.failure.startswith(
        "Nomad refuses the HA lock supervisor/leader (HTTP 403: Permission denied)"
    )
    assert daemon.failure.endswith(
        "the token needs variables read and write on supervisor/leader in the daemon's namespace"
    )


@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), health=HealthSettings(stream_down_grace=2.0))]
)
async def test_nomad_gone_past_the_grace_is_critical_however_often_the_daemon_tried(
    harness: Harness, settings: Settings
) -> None:
    """The grace is the setting under test, shortened from 30 s so that the test takes seconds."""
    gate = harness.service.gate
    await harness.wait_for(lambda: gate.state is StreamState.UP)
    for server in harness.cluster.servers:
        harness.cluster.restart_server(server.name, downtime=60.0)
    await harness.wait_for(lambda: harness.service.informer.backoff.failures >= 3, within=30)
    await harness.wait_for(lambda: gate.down_for(trio.current_time()) > 2.5, within=10)
    details = (await harness.http.get("/health/details")).json()
    stream = details["checks"]["event_stream"]
    assert stream["status"] == "critical"
    assert stream["down_seconds"] > 2.5
    assert stream["for_seconds"] < stream["down_seconds"], "an attempt since moved the state, not the loss"
    assert details["status"] == "critical"


WITHOUT_EXEC = "no-exec-token"
NO_EXEC = """
namespace "default" {
  policy       = "read"
  capabilities = ["submit-job", "alloc-lifecycle"]
}
node { policy = "read" }
"""


@pytest.mark.parametrize(
    "sim_config",
    [
        attrs.evolve(
            SIM,
            acl_tokens=(AclToken(WITHOUT_EXEC, ("no-exec",), name="no-exec"),),
            acl_policies=(AclPolicy("no-exec", NO_EXEC),),
        )
    ],
)
@pytest.mark.parametrize(
    "settings", [Settings(server=ServerSettings(port=0), nomad=NomadSection(token=WITHOUT_EXEC))]
)
async def test_a_token_without_exec_is_a_fault_each_execution_names(
    harness: Harness, sim_config: SimConfig, settings: Settings
) -> None:
    await harness.environment(10)
    runner = await harness.runner(10)
    messages = await harness.execute(runner, command="true")
    assert messages[-1]["type"] == "error"
    assert "Permission denied" in messages[-1]["data"]
    (fault,) = harness.service.faults.active()
    assert (fault.kind.value, fault.subject) == ("token_refused", "exec")
    assert "alloc-exec" in fault.remedy
    assert (await harness.http.get("/health/details")).json()["status"] == "critical"
