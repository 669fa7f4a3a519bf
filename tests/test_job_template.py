"""The runner job as Poseidon makes it: its default template, a template of the operator's, the
network of networked runners and ``force_pull``. Plain sync tests: building a job does no I/O."""

from __future__ import annotations

import copy
from typing import Any

import attrs
import pytest

from supervisor.base.errors import ConfigError
from supervisor.core.environments import ExecutionEnvironment, runner_job, template_job
from supervisor.core.job_template import POSEIDON_TEMPLATE, JobShape, checked_template
from supervisor.dst.poseidon_jobs import poseidon_loads

OFFLINE = ExecutionEnvironment(10, "python:3.12", 2, 20.0, 512, network_access=False)
NETWORKED = ExecutionEnvironment(11, "python:3.12", 2, 20.0, 512, network_access=True)
WITH_PORTS = ExecutionEnvironment(12, "python:3.12", 2, 20.0, 512, network_access=True, exposed_ports=(8080,))


def group(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in job["TaskGroups"] if g["Name"] == name)


def task(job: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in group(job, "default-group")["Tasks"] if t["Name"] == "default-task")


def test_the_default_runner_job_carries_poseidons_template() -> None:
    job = runner_job(OFFLINE, "10-runner")
    runner = group(job, "default-group")
    assert job["Type"] == "batch"
    assert job["Datacenters"] == ["dc1"]
    assert runner["Count"] == 1
    assert runner["EphemeralDisk"] == {"Migrate": False, "SizeMB": 10, "Sticky": False}
    assert runner["Spreads"] == [{"Attribute": "${node.unique.name}", "Weight": 100}]
    assert runner["RestartPolicy"]["Mode"] == "fail"
    assert runner["ReschedulePolicy"]["DelayFunction"] == "exponential"
    assert task(job)["LogConfig"] == {"MaxFiles": 1, "MaxFileSizeMB": 1}
    assert task(job)["KillSignal"] == "SIGKILL"
    assert task(job)["Config"]["command"] == "sleep"
    assert task(job)["Resources"] == {"CPU": 20, "MemoryMB": 50, "MemoryMaxMB": 512}
    claim = group(job, "config")
    assert claim["Count"] == 0
    assert claim["Meta"] == {"used": "false", "timeout": "0", "prewarmingPoolSize": "2"}
    assert claim["Tasks"][0]["LogConfig"] == {"MaxFiles": 1, "MaxFileSizeMB": 1}
    assert job["Meta"] == {"environment": "10", "forcePull": "false"}


def test_an_offline_runner_has_no_network_and_a_networked_one_never_docker_s_bridge() -> None:
    offline = runner_job(OFFLINE, "10-runner")
    assert task(offline)["Config"]["network_mode"] == "none"
    assert group(offline, "default-group")["Networks"] == []
    networked = runner_job(NETWORKED, "11-runner")
    assert task(networked)["Config"]["network_mode"] == ""
    assert group(networked, "default-group")["Networks"] == [{"Mode": "bridge", "DynamicPorts": []}]
    assert "ports" not in task(networked)["Config"]


def test_network_settings_give_the_mode_dns_and_the_exposed_ports() -> None:
    shape = JobShape(network_mode="cni/secure-bridge", dns_servers=("10.0.0.53",), dns_options=("ndots:1",))
    job = runner_job(WITH_PORTS, "12-runner", shape=shape)
    assert group(job, "default-group")["Networks"] == [
        {
            "Mode": "cni/secure-bridge",
            "DNS": {"Servers": ["10.0.0.53"], "Searches": [], "Options": ["ndots:1"]},
            "DynamicPorts": [{"Label": "8080", "To": 8080}],
        }
    ]


def test_force_pull_is_written_as_asked_and_never_when_disabled() -> None:
    assert task(runner_job(OFFLINE, "10-a", force_pull=True))["Config"]["force_pull"] is True
    assert task(runner_job(OFFLINE, "10-b"))["Config"]["force_pull"] is False
    assert runner_job(OFFLINE, "10-a", force_pull=True)["Meta"]["forcePull"] == "true"
    disabled = JobShape(disable_force_pull=True)
    job = runner_job(OFFLINE, "10-c", force_pull=True, shape=disabled)
    assert task(job)["Config"]["force_pull"] is False
    assert job["Meta"]["forcePull"] == "false"
    assert task(template_job(OFFLINE))["Config"]["force_pull"] is True
    assert task(template_job(OFFLINE, disabled))["Config"]["force_pull"] is False


def test_the_template_job_holds_the_definition_and_runs_one_container() -> None:
    """As Poseidon's template job: its runner group at count 1 (Poseidon loads running templates
    only), a service job (never garbage-collected while not stopped) whose allocation is always
    replaced, its shape named in its meta."""
    job = template_job(OFFLINE)
    assert job["ID"] == "template-10"
    assert job["Type"] == "service"
    assert {g["Name"]: g["Count"] for g in job["TaskGroups"]} == {"default-group": 1, "config": 0}
    assert group(job, "default-group")["ReschedulePolicy"]["Unlimited"] is True
    assert group(job, "default-group")["ReschedulePolicy"]["Attempts"] == 0
    assert "supervisor.environment" in job["Meta"]
    assert job["Meta"]["supervisor.template"] == "2"


@pytest.mark.parametrize("environment", [OFFLINE, NETWORKED, WITH_PORTS])
def test_poseidons_loader_reads_our_template_as_the_same_environment(
    environment: ExecutionEnvironment,
) -> None:
    assert poseidon_loads(template_job(environment), "running") == {
        **environment.to_api(),
        "exposedPorts": list(environment.exposed_ports) or None,
    }


def test_poseidons_loader_reads_a_cpu_limit_rounded() -> None:
    """Nomad takes whole MHz; our meta holds the exact limit, Poseidon reads the task's."""
    loaded = poseidon_loads(template_job(attrs.evolve(OFFLINE, cpu_limit=20.6)), "running")
    assert loaded is not None
    assert loaded["cpuLimit"] == 21


def test_poseidons_loader_skips_a_template_that_does_not_run() -> None:
    assert poseidon_loads(template_job(OFFLINE), "dead") is None
    assert poseidon_loads(template_job(OFFLINE), "pending") is None


def test_an_operators_template_keeps_what_it_says_and_takes_the_environment() -> None:
    template = copy.deepcopy(dict(POSEIDON_TEMPLATE))
    template["Datacenters"] = ["eu-west"]
    template["NodePool"] = "runners"
    template["Constraints"] = [{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}]
    template["Meta"] = {"team": "edu"}
    docker = template["TaskGroups"][0]["Tasks"][0]
    docker["Config"] = {**docker["Config"], "runtime": "runsc", "security_opt": ["no-new-privileges"]}
    docker["Resources"] = {"CPU": 40, "MemoryMB": 100}
    shape = JobShape.of({"Job": template})
    job = runner_job(OFFLINE, "10-runner", avoid=["node-1"], shape=shape)
    assert job["Datacenters"] == ["eu-west"]
    assert job["NodePool"] == "runners"
    assert job["Meta"] == {"team": "edu", "environment": "10", "forcePull": "false"}
    assert job["Constraints"][0]["RTarget"] == "linux"
    assert job["Constraints"][1] == {"LTarget": "${node.unique.id}", "RTarget": "node-1", "Operand": "!="}
    config = task(job)["Config"]
    assert (config["runtime"], config["security_opt"], config["image"]) == (
        "runsc",
        ["no-new-privileges"],
        "python:3.12",
    )
    assert task(job)["Resources"] == {"CPU": 20, "MemoryMB": 100, "MemoryMaxMB": 512}


def test_what_poseidon_adds_to_a_template_is_added() -> None:
    shape = JobShape.of({"Datacenters": ["dc2"], "TaskGroups": []})
    job = runner_job(OFFLINE, "10-runner", shape=shape)
    assert [g["Name"] for g in job["TaskGroups"]] == ["default-group", "config"]
    assert task(job)["Driver"] == "docker"
    assert task(job)["Config"]["args"] == ["infinity"]
    assert group(job, "config")["Tasks"][0]["Config"] == {"command": "true"}


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ([], "not a job"),
        ({"Type": "service"}, "type is 'service'"),
        ({"TaskGroups": [{"Name": "a"}, {"Name": "a"}]}, "two are named 'a'"),
        ({"TaskGroups": [{"Name": "sidecar"}]}, "group 'sidecar'"),
        (
            {"TaskGroups": [{"Name": "default-group", "Tasks": [{"Name": "default-task", "Driver": "raw"}]}]},
            "runs the driver 'raw'; runners need docker",
        ),
        ({"TaskGroups": [{"Name": "config", "Tasks": [{"Name": "other", "Driver": "exec"}]}]}, "not 'other'"),
        ({"Periodic": {"Spec": "* * * * *"}}, "cannot be periodic"),
    ],
)
def test_a_template_that_cannot_carry_a_runner_says_what_is_missing(template: Any, problem: str) -> None:
    with pytest.raises(ConfigError, match=r"^the job template: ") as raised:
        checked_template(template)
    assert problem in str(raised.value)
