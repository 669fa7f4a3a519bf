"""Poseidon's template jobs read as environments by Poseidon's own rules
(``supervisor/core/poseidon_templates.py``): every field, and each field that makes a template no
environment. Plain synchronous tests of a pure function; the jobs are built as Poseidon builds them
(``supervisor/dst/poseidon_jobs.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.poseidon_templates import (
    PoseidonTemplateError,
    environment_from_poseidon_job,
    template_environment_id,
)
from supervisor.dst.poseidon_jobs import poseidon_loads, poseidon_template_job

ENVIRONMENT: dict[str, Any] = {
    "id": 10,
    "image": "openhpi/co_execenv_python:3.8",
    "prewarmingPoolSize": 3,
    "cpuLimit": 20,
    "memoryLimit": 256,
    "networkAccess": True,
    "exposedPorts": [8080, 3000],
}


def job(**changes: Any) -> dict[str, Any]:
    return {**poseidon_template_job({**ENVIRONMENT, **changes})}


def group(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in document["TaskGroups"] if g["Name"] == name)


def test_every_field_of_poseidons_template_is_read() -> None:
    assert environment_from_poseidon_job(job()) == ExecutionEnvironment(
        id=10,
        image="openhpi/co_execenv_python:3.8",
        prewarming_pool_size=3,
        cpu_limit=20.0,
        memory_limit=256,
        network_access=True,
        exposed_ports=(8080, 3000),
    )


def test_an_offline_template_has_no_network_and_no_ports() -> None:
    environment = environment_from_poseidon_job(job(networkAccess=False, exposedPorts=[]))
    assert (environment.network_access, environment.exposed_ports) == (False, ())


def test_a_template_as_nomad_answers_it_is_read_the_same() -> None:
    """GET fills in what the register left out (empty maps, zero ports' values): nothing changes."""
    answered = job()
    answered["Meta"] = None
    runner_group = group(answered, "default-group")
    runner_group["Networks"][0]["ReservedPorts"] = None
    runner_group["Tasks"][0]["Resources"].update(Cores=0, DiskMB=None, MemoryMB=50)
    assert environment_from_poseidon_job(answered) == environment_from_poseidon_job(job())


@pytest.mark.parametrize(
    ("job_id", "expected"),
    [
        ("template-10", 10),
        ("template-0", 0),
        ("template-007", 7),
        ("template-", None),
        ("template-1-2", None),
        ("template-x", None),
        ("template-+1", None),
        ("template-²", None),
        ("templates-1", None),
        ("10-0f4c3a3e-5b6d-11ef-8a1e-0242ac120002", None),
        (f"template-{2**63}", None),
    ],
)
def test_template_ids(job_id: str, expected: int | None) -> None:
    assert template_environment_id(job_id) == expected


@pytest.mark.parametrize(
    ("raw", "size"),
    [("5", 5), ("+5", 5), ("-5", 0), ("five", 0), ("", 0), ("5.0", 0), ("\u0665", 0)],
)
def test_the_pool_size_as_poseidon_parses_it(raw: str, size: int) -> None:
    """Go's strconv.Atoi: a sign and ASCII digits; what does not parse, or is negative, is 0."""
    document = job()
    group(document, "config")["Meta"]["prewarmingPoolSize"] = raw
    assert environment_from_poseidon_job(document).prewarming_pool_size == size


def test_a_template_without_the_config_group_has_a_pool_of_zero() -> None:
    document = job()
    document["TaskGroups"] = [group(document, "default-group")]
    assert environment_from_poseidon_job(document).prewarming_pool_size == 0


def test_a_network_mode_other_than_none_allows_the_network() -> None:
    document = job()
    del group(document, "default-group")["Tasks"][0]["Config"]["network_mode"]
    assert environment_from_poseidon_job(document).network_access is True


def test_ports_beyond_the_range_are_left_out() -> None:
    document = job()
    ports = group(document, "default-group")["Networks"][0]["DynamicPorts"]
    ports.append({"Label": "big", "To": 70000})
    assert environment_from_poseidon_job(document).exposed_ports == (8080, 3000)


def _bad(**replace: Any) -> dict[str, Any]:
    document = job()
    for key, value in replace.items():
        runner_task = group(document, "default-group")["Tasks"][0]
        if key == "image":
            runner_task["Config"]["image"] = value
        elif key == "cpu":
            runner_task["Resources"]["CPU"] = value
        elif key == "memory":
            runner_task["Resources"]["MemoryMaxMB"] = value
        elif key == "pool":
            group(document, "config")["Meta"]["prewarmingPoolSize"] = value
        elif key == "id":
            document["ID"] = value
    return document


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (_bad(id="template-x"), "not a template job ID"),
        (_bad(id=None), "not a template job ID"),
        (_bad(image=""), "image must be a non-empty string"),
        (_bad(image=7), "image must be a non-empty string"),
        (_bad(cpu=0), "no CPU limit"),
        (_bad(cpu=-5), "no CPU limit"),
        (_bad(memory=0), "no memory limit"),
        (_bad(memory=None), "no memory limit"),
        (_bad(pool="20000"), "prewarmingPoolSize must be at most 10000"),
        ({"ID": "template-1", "TaskGroups": []}, "no group default-group"),
        ({"ID": "template-1", "TaskGroups": None}, "no group default-group"),
        (
            {"ID": "template-1", "TaskGroups": [{"Name": "default-group", "Tasks": []}]},
            "no task default-task",
        ),
    ],
)
def test_a_template_that_is_no_environment_says_why(document: dict[str, Any], reason: str) -> None:
    with pytest.raises(PoseidonTemplateError, match=reason):
        environment_from_poseidon_job(document)


def test_a_template_without_resources_has_no_memory_limit() -> None:
    with pytest.raises(PoseidonTemplateError, match="no memory limit"):
        document = job()
        del group(document, "default-group")["Tasks"][0]["Resources"]
        environment_from_poseidon_job(document)


def test_poseidons_loader_and_ours_read_its_template_alike() -> None:
    """The mirror of Poseidon's loader (which the tests of our own template use) reads Poseidon's
    template as the environment it was made from, as our decoding does."""
    loaded = poseidon_loads(job(), "running")
    assert loaded == ENVIRONMENT
    assert environment_from_poseidon_job(job()).to_api() == ENVIRONMENT
    assert poseidon_loads(job(), "dead") is None


def test_poseidons_loader_falls_back_as_poseidon_does() -> None:
    document = job()
    runner_group = group(document, "default-group")
    del runner_group["Tasks"][0]["Resources"]
    group(document, "config")["Meta"]["prewarmingPoolSize"] = "many"
    loaded = poseidon_loads(document, "running")
    assert loaded is not None
    assert (loaded["cpuLimit"], loaded["memoryLimit"], loaded["prewarmingPoolSize"]) == (100, 0, 0)
