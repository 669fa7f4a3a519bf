"""An environment as a client sends it and as the daemon writes it, at the edges: the limits' exact
bounds, the field a refusal names, the default place a refusal names, a whole CPU limit written as an
integer, and a template job keeping its template's meta. Plain sync tests."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.base.errors import InvalidRequest
from supervisor.core.environments import (
    MAX_AMOUNT,
    MAX_ID,
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


def test_an_environment_put_at_its_path_takes_the_path_s_id() -> None:
    body = {key: value for key, value in VALID.items() if key != "id"}
    assert environment_from_dict(body, environment_id=7).id == 7
    assert environment_from_dict({**body, "id": 7}, environment_id=7).id == 7
    with pytest.raises(InvalidRequest) as refused:
        environment_from_dict({**body, "id": 8}, environment_id=7)
    assert str(refused.value) == "body.id 8 does not match the path's 7"
    with pytest.raises(InvalidRequest) as refused:
        environment_from_dict({**body, "id": "7"}, environment_id=7)
    assert str(refused.value) == "body: id must be an integer of at least 0, got '7'"


def test_a_missing_field_is_named_as_the_client_or_the_file_spells_it() -> None:
    body = {key: value for key, value in VALID.items() if key not in ("cpuLimit", "memoryLimit")}
    with pytest.raises(InvalidRequest) as refused:
        environment_from_dict(body)
    assert str(refused.value) == "body: cpuLimit is required"
    with pytest.raises(InvalidRequest) as refused:
        environment_from_dict({"image": "python:3.12"}, where="environments[0]", snake_case=True)
    assert str(refused.value) == "environments[0]: prewarming_pool_size is required"
    with pytest.raises(InvalidRequest) as refused:
        environment_from_dict({key: value for key, value in VALID.items() if key != "id"})
    assert str(refused.value) == "body: id is required"


def test_an_image_with_a_nul_byte_is_refused() -> None:
    assert refusal(image="python\x003") == "body: image must be Unicode text without NUL bytes"


@pytest.mark.parametrize("cpu", [0, -1, MAX_AMOUNT + 1, True, "20"])
def test_a_cpu_limit_is_a_positive_number_up_to_the_maximum(cpu: Any) -> None:
    assert (
        refusal(cpuLimit=cpu) == f"body: cpuLimit must be a positive number up to {MAX_AMOUNT}, got {cpu!r}"
    )


def test_the_largest_cpu_limit_and_id_are_taken() -> None:
    environment = environment_from_dict({**VALID, "cpuLimit": MAX_AMOUNT, "id": MAX_ID})
    assert (environment.cpu_limit, environment.id) == (float(MAX_AMOUNT), MAX_ID)
    assert refusal(id=MAX_ID + 1) == f"body: id must be at most {MAX_ID}, got {MAX_ID + 1}"
    assert refusal(exposedPorts=[65536]) == "body: exposedPorts[] must be at most 65535, got 65536"


def test_network_access_and_ports_of_the_wrong_type_are_refused_by_name() -> None:
    assert refusal(networkAccess="yes") == "body: networkAccess must be true or false"
    assert refusal(exposedPorts=8080) == "body: exposedPorts must be an array"


def test_an_id_past_the_largest_amount_is_taken_at_its_path() -> None:
    body = {**VALID, "id": 2**40}
    assert environment_from_dict(body, environment_id=2**40).id == 2**40
