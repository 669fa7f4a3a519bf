"""An environment as a client sends it and as the daemon writes it, at the edges: the limits' exact
bounds, the field a refusal names, the default place a refusal names, a whole CPU limit written as an
integer, and a template job keeping its template's meta. Plain sync tests."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.base.errors import InvalidRequest
from supervisor.core.environments import (
    MAX_AMOUNT,
    ExecutionEnvironment,
    environment_from_dict,
    environment_from_template,
    template_job,
)
from supervisor.core.job_template import JobShape

VALID: dict[str, Any] = {
    "id": 10,
    "image": "python:3.12",
    "prewarmingPoolSize": 2,
    "cpuLimit": 20,
    "memoryLimit": 256,
    "networkAccess": False,
    "exposedPorts": [],
}


def refusal(**changes: Any) -> str:
    with pytest.raises(InvalidRequest) as refused:
        environment_from_dict({**VALID, **changes})
    return str(refused.value)


def test_a_refusal_names_the_body_by_default() -> None:
    assert refusal(memoryLimit=0) == "body: memoryLimit must be an integer of at least 1, got 0"
    with pytest.raises(InvalidRequest) as refused:
        environment_from_dict([1])
    assert str(refused.value) == "body must be a JSON object"


def test_an_unknown_field_is_refused_by_name() -> None:
    assert refusal(colour="red") == "body: unknown field 'colour'"


def test_the_bounds_of_an_integer_are_taken_and_one_past_them_is_not() -> None:
    assert environment_from_dict({**VALID, "memoryLimit": MAX_AMOUNT}).memory_limit == MAX_AMOUNT
    assert (
        refusal(memoryLimit=MAX_AMOUNT + 1)
        == f"body: memoryLimit must be at most {MAX_AMOUNT}, got {MAX_AMOUNT + 1}"
    )
    assert environment_from_dict({**VALID, "exposedPorts": [1, 65535]}).exposed_ports == (1, 65535)
    assert refusal(exposedPorts=[0]) == "body: exposedPorts[] must be an integer of at least 1, got 0"


@pytest.mark.parametrize("value", [True, 2.0, "2"])
def test_an_integer_field_takes_integers_only(value: Any) -> None:
    assert refusal(prewarmingPoolSize=value) == (
        f"body: prewarmingPoolSize must be an integer of at least 0, got {value!r}"
    )


def test_an_image_that_is_no_unicode_text_is_refused() -> None:
    assert refusal(image="python\udc80") == "body: image must be Unicode text without NUL bytes"


def test_a_whole_cpu_limit_is_written_as_an_integer_and_another_as_it_is() -> None:
    whole = ExecutionEnvironment(10, "python:3.12", 2, 20.0, 256, False, ())
    assert whole.to_api()["cpuLimit"] == 20
    assert isinstance(whole.to_api()["cpuLimit"], int)
    assert ExecutionEnvironment(10, "python:3.12", 2, 20.5, 256, False, ()).to_api()["cpuLimit"] == 20.5


def test_a_template_job_keeps_its_template_s_meta_beside_the_environment() -> None:
    environment = ExecutionEnvironment(10, "python:3.12", 2, 20.0, 256, False, ())
    job = template_job(environment, JobShape.of({"Meta": {"team": "edu"}}))
    assert job["Meta"]["team"] == "edu"
    assert environment_from_template(job["Meta"]) == environment
