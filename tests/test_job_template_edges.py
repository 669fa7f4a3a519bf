"""Runner jobs built from a template at the edges (``build_job``): the job's name, each group's
count, the smallest CPU, a memory limit under the reservation, an offline runner's network, and a
claim written beside the template's own claim-group meta. Plain sync tests, nothing is sent."""

from __future__ import annotations

from typing import Any

from supervisor.core.environments import ExecutionEnvironment
from supervisor.core.job_template import RESERVED_MEMORY_MB, JobShape, build_job

ONLINE = ExecutionEnvironment(10, "python:3.12", 2, 0.4, 256, True, (8080,))
OFFLINE = ExecutionEnvironment(11, "python:3.12", 2, 100.0, 16, False, ())


def group(job: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(g for g in job["TaskGroups"] if g["Name"] == name)
    return found


def task(job: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = group(job, "default-group")["Tasks"][0]
    return found


def test_the_job_is_named_by_its_id_and_its_groups_counted_as_asked() -> None:
    job = build_job(JobShape(), ONLINE, "10-r1", count=3, force_pull=False, claim={})
    assert (job["ID"], job["Name"]) == ("10-r1", "10-r1")
    assert group(job, "default-group")["Count"] == 3
    assert group(job, "config")["Count"] == 0, "the claim group never runs"


def test_a_cpu_limit_under_one_mhz_is_one_and_a_small_memory_limit_is_all_reserved() -> None:
    job = build_job(JobShape(), ONLINE, "10-r1", count=1, force_pull=False, claim={})
    assert task(job)["Resources"]["CPU"] == 1
    assert RESERVED_MEMORY_MB > 16
    offline = build_job(JobShape(), OFFLINE, "11-r1", count=1, force_pull=False, claim={})
    assert task(offline)["Resources"]["MemoryMB"] == 16
    assert task(offline)["Resources"]["MemoryMaxMB"] == 16


def test_an_offline_runner_has_no_network_at_all() -> None:
    job = build_job(JobShape(), OFFLINE, "11-r1", count=1, force_pull=False, claim={})
    assert group(job, "default-group")["Networks"] == []
    assert task(job)["Config"]["network_mode"] == "none"


def test_a_claim_is_written_beside_the_template_s_own_claim_group_meta() -> None:
    template = {"TaskGroups": [{"Name": "config", "Meta": {"team": "edu", "used": "stale"}}]}
    job = build_job(JobShape.of(template), ONLINE, "10-r1", count=1, force_pull=False, claim={"used": "true"})
    assert group(job, "config")["Meta"] == {"team": "edu", "used": "true", "prewarmingPoolSize": "2"}


def test_an_operator_s_template_cannot_make_an_offline_runner_networked_or_its_claim_group_run() -> None:
    template = {
        "TaskGroups": [
            {
                "Name": "default-group",
                "Tasks": [{"Name": "default-task", "Driver": "docker", "Config": {"network_mode": "host"}}],
            },
            {"Name": "config", "Count": 1},
        ]
    }
    job = build_job(JobShape.of(template), OFFLINE, "11-r1", count=1, force_pull=False, claim={})
    assert task(job)["Config"]["network_mode"] == "none"
    assert group(job, "config")["Count"] == 0
