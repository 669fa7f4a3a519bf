"""Poseidon's template jobs read at the edges: the largest template ID, the first and last ports of
the range, the smallest limits, the reason naming its template, and Go's Atoi on a sign."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.core.environments import MAX_ID
from supervisor.core.poseidon_templates import (
    PoseidonTemplateError,
    environment_from_poseidon_job,
    go_atoi,
    template_environment_id,
)
from supervisor.dst.poseidon_jobs import poseidon_template_job

ENVIRONMENT: dict[str, Any] = {
    "id": 10,
    "image": "openhpi/co_execenv_python:3.8",
    "prewarmingPoolSize": 3,
    "cpuLimit": 20,
    "memoryLimit": 256,
    "networkAccess": True,
    "exposedPorts": [8080],
}


def runner_task(document: dict[str, Any]) -> dict[str, Any]:
    group = next(g for g in document["TaskGroups"] if g["Name"] == "default-group")
    task: dict[str, Any] = group["Tasks"][0]
    return task


def test_the_largest_template_id_is_the_largest_environment_id() -> None:
    assert template_environment_id(f"template-{MAX_ID}") == MAX_ID
    assert template_environment_id(f"template-{MAX_ID + 1}") is None


@pytest.mark.parametrize(
    ("text", "value"), [("-5", -5), ("+5", 5), ("5", 5), ("-0", 0), ("-", None), ("--5", None)]
)
def test_atoi_takes_one_sign(text: str, value: int | None) -> None:
    assert go_atoi(text) == value


def test_atoi_stays_within_an_int64() -> None:
    assert go_atoi(str(-(2**63))) == -(2**63)
    assert go_atoi(str(2**63 - 1)) == 2**63 - 1
    assert go_atoi(str(2**63)) is None


def test_the_first_and_the_last_port_of_the_range_are_kept_and_0_is_not() -> None:
    document = poseidon_template_job(ENVIRONMENT)
    group = next(g for g in document["TaskGroups"] if g["Name"] == "default-group")
    group["Networks"][0]["DynamicPorts"] = [{"To": 0}, {"To": 1}, {"To": 65535}, {"To": 65536}]
    assert environment_from_poseidon_job(document).exposed_ports == (1, 65535)


def test_the_smallest_limits_are_taken() -> None:
    document = poseidon_template_job(ENVIRONMENT)
    runner_task(document)["Resources"].update(CPU=1, MemoryMaxMB=1)
    environment = environment_from_poseidon_job(document)
    assert (environment.cpu_limit, environment.memory_limit) == (1.0, 1)


def test_a_template_that_is_no_environment_names_itself_in_the_reason() -> None:
    document = poseidon_template_job({**ENVIRONMENT, "prewarmingPoolSize": 20000})
    with pytest.raises(PoseidonTemplateError) as refused:
        environment_from_poseidon_job(document)
    assert str(refused.value) == "template-10: prewarmingPoolSize must be at most 10000, got 20000"


def test_atoi_refuses_one_below_the_smallest_int64() -> None:
    assert go_atoi(str(-(2**63) - 1)) is None
