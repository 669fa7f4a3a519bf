"""Decoding Nomad's JSON, in Nomad's exact shapes (fixtures from nomad-api.md and Nomad's encoder)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from supervisor.nomad import (
    EVENT_TYPES_NODE_ELIGIBILITY,
    Allocation,
    AllocListStub,
    Evaluation,
    Job,
    JobListStub,
    Node,
    NodeListStub,
    decode_batch,
    structure,
    structure_list,
)
from supervisor.nomad.decode import nomad_key

from .conftest import FIXTURES, load_fixture


def test_keys_follow_nomads_spelling() -> None:
    assert nomad_key("eval_id") == "EvalID"
    assert nomad_key("failed_tg_allocs") == "FailedTGAllocs"
    assert nomad_key("host_ip") == "HostIP"
    assert nomad_key("http_addr") == "HTTPAddr"
    assert nomad_key("modify_time_ns") == "ModifyTime"
    assert nomad_key("status_updated_at_s") == "StatusUpdatedAt"
    assert nomad_key("eval_ids") == "EvalIDs"


def test_full_allocation_with_task_states_and_reschedule_tracker() -> None:
    alloc = structure(load_fixture("allocation_running_replacement.json"), Allocation)
    assert alloc.id == "9a8b7c6d-5e4f-3a2b-1c0d-e9f8a7b6c5d4"
    assert alloc.client_status == "running"
    assert alloc.desired_status == "run"
    assert alloc.previous_allocation == "5e1c6f0a-2b8d-4c3e-9f71-0a9d3c2e7b11"
    assert alloc.create_time_ns == 1787401000000000000
    assert [(p.label, p.host_ip, p.value, p.to) for p in alloc.ports] == [("ssh", "10.0.1.14", 28113, 22)]
    state = alloc.task_states["runner"]
    assert state.state == "running"
    assert state.started_at == datetime(2026, 8, 22, 10, 16, 49, 400000, tzinfo=UTC)
    assert state.finished_at is None, "Nomad's zero time means 'never'"
    assert state.last_restart is None
    assert [e.type for e in state.events] == ["Received", "Started"]
    assert state.events[1].time_ns == 1787401009400000000
    tracker = alloc.reschedule_tracker
    assert tracker is not None
    assert tracker.last_reschedule == "ok"
    assert tracker.events[0].delay_ns == 5_000_000_000
    assert tracker.events[0].prev_node_id == "c0d1f2e3-4a5b-6c7d-8e9f-0a1b2c3d4e5f"


def test_omitted_allocation_fields_read_as_zero_values() -> None:
    # The PlanResult payload omits NextAllocation, DesiredTransition, TaskStates, RescheduleTracker...
    batch = decode_batch((FIXTURES / "event_stream_example.ndjson").read_bytes().splitlines()[1])
    assert batch is not None
    alloc = batch.events[0].payload
    assert isinstance(alloc, Allocation)
    assert alloc.next_allocation == ""
    assert alloc.previous_allocation == ""
    assert alloc.task_states == {}
    assert alloc.reschedule_tracker is None
    assert not alloc.desired_transition.migrate
    assert alloc.client_description == ""
    assert not alloc.client_terminal
    assert not alloc.server_terminal


def test_allocation_list_stubs_with_nulls_and_local_offsets() -> None:
    stubs = structure_list(load_fixture("allocations_list_resources.json"), AllocListStub)
    running, lost = stubs
    assert running.job_type == "batch"
    assert running.job_version == 3
    assert running.ports[0].value == 24011
    started = running.task_states["default-task"].started_at
    assert started == datetime(2026, 8, 22, 10, 16, 49, 400000, tzinfo=timezone(timedelta(hours=-4)))
    assert running.task_states["default-task"].events == [], "null Events is an empty list"
    assert lost.allocated_resources is None
    assert lost.ports == []
    assert lost.task_states == {}, "null TaskStates is an empty map"
    assert lost.desired_transition.migrate
    assert not lost.desired_transition.reschedule, "null *bool reads as False"
    assert lost.client_terminal
    assert lost.server_terminal
    assert lost.next_allocation == running.id


def test_job_list_stubs_and_meta() -> None:
    template, runner = structure_list(load_fixture("jobs_list.json"), JobListStub)
    assert template.status == "dead"
    assert not template.stop, "dead but existing: not stopped"
    assert template.meta == {}, "Meta is only sent with meta=true"
    assert runner.meta == {"used": "true", "timeout": "60"}
    assert runner.submit_time_ns == 1787399999876543210


def test_full_job() -> None:
    job = structure(load_fixture("job_runner.json"), Job)
    assert job.id == "runner-7f3a"
    assert job.type == "batch"
    assert job.status == "running"
    assert job.meta == {"pool": "ci-linux"}
    group = job.group("runner")
    assert group is not None
    assert group.meta == {}, "null Meta is an empty map"
    assert group.tasks[0].driver == "docker"
    assert job.group("nope") is None


def test_draining_node() -> None:
    node = structure(load_fixture("node_draining.json"), Node)
    assert node.drain
    assert not node.eligible
    assert node.status_updated_at_s == 1787392931
    strategy = node.drain_strategy
    assert strategy is not None
    assert strategy.deadline_ns == 3_600_000_000_000
    assert strategy.force_deadline == datetime(2026, 8, 22, 11, 2, 11, 482913, tzinfo=UTC)
    assert node.meta == {"pool": "ci-linux"}


def test_node_list_stubs() -> None:
    draining, ready = structure_list(load_fixture("nodes_list.json"), NodeListStub)
    assert draining.drain
    assert draining.scheduling_eligibility == "ineligible"
    assert draining.version == "1.10.5"
    assert ready.eligible
    assert not ready.drain


def test_evaluation_with_omitted_fields() -> None:
    evaluation = structure(load_fixture("evaluation_blocked.json"), Evaluation)
    assert evaluation.blocked_eval.startswith("a1b2c3d4")
    assert "default-group" in evaluation.failed_tg_allocs
    assert evaluation.node_id == "", "omitted NodeID reads as empty"
    assert evaluation.next_eval == ""


def test_event_types_as_nomad_sends_them() -> None:
    lines = (FIXTURES / "event_types.ndjson").read_bytes().splitlines()
    batches = [decode_batch(line) for line in lines]
    assert all(b is not None for b in batches)
    drain, eligibility, deregistered, deployment = batches
    assert drain is not None
    assert eligibility is not None
    assert deregistered is not None
    assert deployment is not None
    assert drain.events[0].type in EVENT_TYPES_NODE_ELIGIBILITY
    assert eligibility.events[0].type in EVENT_TYPES_NODE_ELIGIBILITY
    node = drain.events[0].payload
    assert isinstance(node, Node)
    assert node.drain_strategy is not None
    assert node.drain_strategy.deadline_ns == 15_000_000_000
    job_event, eval_event = deregistered.events
    assert job_event.type == eval_event.type == "JobDeregistered", "one Raft message, one Type"
    assert job_event.deleted
    assert isinstance(job_event.payload, Job)
    assert job_event.payload.task_groups == []
    assert isinstance(eval_event.payload, Evaluation)
    assert eval_event.filter_keys == ["runner-7f3a", ""]
    assert deployment.events[0].payload == {"Deployment": {"ID": "d-1", "Status": "running"}}, (
        "unknown topics stay raw"
    )


def test_node_event_has_empty_namespace_and_null_filter_keys() -> None:
    batch = decode_batch((FIXTURES / "event_stream_example.ndjson").read_bytes().splitlines()[2])
    assert batch is not None
    event = batch.events[0]
    assert event.type == "NodeStreamEvent"
    assert event.namespace == ""
    assert event.filter_keys == []
    assert isinstance(event.payload, Node)
    assert event.payload.status == "down"


def test_heartbeat_is_none_and_unknown_keys_are_ignored() -> None:
    assert decode_batch(b"{}") is None
    alloc = structure({"ID": "a", "SomethingNew": {"x": 1}, "ClientStatus": "running"}, Allocation)
    assert alloc.id == "a"
    assert alloc.client_status == "running"


@pytest.mark.parametrize(
    "line",
    [b"not json", b"[1, 2]", b'{"Index": 5, "Events": "nope"}', b'{"Index": 5, "Events": [{"Type": "x"}]}'],
)
def test_malformed_batches_raise_value_error(line: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - orjson's error and ours are both ValueErrors
        decode_batch(line)


def test_decoded_models_are_values() -> None:
    raw = load_fixture("allocation_running_replacement.json")
    assert structure(raw, Allocation) == structure(orjson.loads(orjson.dumps(raw)), Allocation)


def _batch(topic: str, payload: Any) -> bytes:
    event = {"Topic": topic, "Type": "Updated", "Key": "k", "Index": 7, "Payload": {topic: payload}}
    return orjson.dumps({"Index": 7, "Events": [event]})


ALLOCATION = ("allocation_running_replacement.json", "Allocation")
PORT = ("AllocatedResources", "Shared", "Ports", 0)


@pytest.mark.parametrize(
    ("source", "path", "value", "named"),
    [
        (ALLOCATION, ("ClientStatus",), 5, "ClientStatus"),
        (ALLOCATION, ("CreateIndex",), "12", "CreateIndex"),
        (ALLOCATION, ("ModifyIndex",), True, "ModifyIndex"),
        (ALLOCATION, ("AllocatedResources",), [], "AllocatedResources"),
        (ALLOCATION, ("AllocatedResources", "Shared", "Ports"), {}, "Ports"),
        (ALLOCATION, (*PORT, "Value"), "28113", "Value"),
        (("job_runner.json", "Job"), ("Stop",), "false", "Stop"),
        (("job_runner.json", "Job"), ("Meta", "pool"), 1, "Meta"),
        (("job_runner.json", "Job"), ("TaskGroups",), {}, "TaskGroups"),
        (("node_draining.json", "Node"), ("Drain",), 1, "Drain"),
        (("node_draining.json", "Node"), ("Events", 0, "Message"), ["registered"], "Message"),
        (("node_draining.json", "Node"), ("DrainStrategy", "ForceDeadline"), 1787392931, "ForceDeadline"),
    ],
)
def test_a_wrong_type_in_what_the_supervisor_reads_is_a_value_error_naming_its_key(
    source: tuple[str, str], path: tuple[str | int, ...], value: Any, named: str
) -> None:
    fixture, topic = source
    payload = load_fixture(fixture)
    target = payload
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(ValueError, match=named):
        decode_batch(_batch(topic, payload))


def test_null_reads_as_the_zero_value() -> None:
    raw = dict.fromkeys(load_fixture("allocation_running_replacement.json"))
    alloc = structure(raw, Allocation)
    assert alloc == Allocation(raw=raw)
    assert (alloc.client_status, alloc.create_index, alloc.allocated_resources) == ("", 0, None)
    assert (alloc.previous_allocation, alloc.create_time_ns, alloc.task_states) == ("", 0, {})
    assert not alloc.desired_transition.migrate
    assert alloc.reschedule_tracker is None
    job = structure(dict.fromkeys(load_fixture("job_runner.json")), Job)
    assert (job.id, job.stop, job.meta, job.task_groups) == ("", False, {}, [])
    node = structure(dict.fromkeys(load_fixture("node_draining.json")), Node)
    assert (node.drain, node.drain_strategy, node.events, node.attributes) == (False, None, [], {})


def test_what_the_pool_does_not_read_of_an_allocation_is_decoded_when_read() -> None:
    raw = load_fixture("allocation_running_replacement.json")
    raw["NodeName"] = 7
    raw["TaskStates"]["runner"]["Restarts"] = "none"
    alloc = structure(raw, Allocation)
    assert alloc.raw is raw, "Nomad's object is kept, not copied"
    assert alloc.client_status == "running"
    assert alloc.name == "runner-7f3a.runner[0]"
    with pytest.raises(ValueError, match="NodeName"):
        _ = alloc.node_name
    with pytest.raises(ValueError, match="Restarts"):
        _ = alloc.task_states


def test_a_jobs_groups_are_decoded_when_read() -> None:
    raw = load_fixture("job_runner.json")
    raw["TaskGroups"][0]["Count"] = "one"
    job = structure(raw, Job)
    assert job.id == "runner-7f3a"
    with pytest.raises(ValueError, match="Count"):
        _ = job.task_groups
