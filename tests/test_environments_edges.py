"""Runner jobs and their claims at the edges: a template that names no type, a job with no claim
group, the DNS of a networked runner when one setting alone is given, and a shape's settings."""

from __future__ import annotations

import pytest

from supervisor.core.environments import ExecutionEnvironment, claim_meta, runner_job
from supervisor.core.job_template import JobShape

ENVIRONMENT = ExecutionEnvironment(10, "python:3.12", 2, 100.0, 256, True, (8080,))
RUNNER_ID = "10-0f4c3a3e-5b6d-11ef-8a1e-0242ac120002"


def test_a_runner_job_is_named_by_its_runner_and_is_a_batch_job_whatever_its_template_says() -> None:
    shape = JobShape.of({"Datacenters": ["dc1"]})  # no Type: Nomad would make it a service
    job = runner_job(ENVIRONMENT, RUNNER_ID, shape=shape)
    assert (job["ID"], job["Name"], job["Type"]) == (RUNNER_ID, RUNNER_ID, "batch")


def test_a_job_without_a_claim_group_holds_no_claim() -> None:
    assert claim_meta({"TaskGroups": [{"Name": "default-group"}]}) == {}
    assert claim_meta({}) == {}
    assert claim_meta({"TaskGroups": [{"Name": "config"}]}) == {}


@pytest.mark.parametrize(
    "dns",
    [
        {"dns_servers": ("10.0.0.53",)},
        {"dns_searches": ("example.org",)},
        {"dns_options": ("ndots:2",)},
    ],
)
def test_one_dns_setting_alone_gives_the_runner_s_network_its_dns(dns: dict[str, tuple[str, ...]]) -> None:
    network = JobShape(**dns).network([8080])  # type: ignore[arg-type]
    assert network["DNS"] == {
        "Servers": list(dns.get("dns_servers", ())),
        "Searches": list(dns.get("dns_searches", ())),
        "Options": list(dns.get("dns_options", ())),
    }


def test_no_dns_setting_leaves_the_network_s_dns_to_nomad() -> None:
    assert "DNS" not in JobShape().network([8080])


def test_a_shape_from_a_template_keeps_its_other_settings() -> None:
    shape = JobShape.of({}, network_mode="host", disable_force_pull=True)
    assert (shape.network_mode, shape.disable_force_pull) == ("host", True)
