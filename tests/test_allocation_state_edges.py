"""What an allocation's state says of its runner, at the edges: each reason a used runner's
allocation ends with (the texts Poseidon's clients match), and the restart delay of its task."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.core.allocation_state import end_reason, is_live, is_running, restart_delay
from supervisor.core.runners import REASON_ALLOCATION_STOPPED, REASON_DRAINED, REASON_NODE_DOWN, REASON_OOM
from supervisor.nomad import Allocation


def alloc(client_status: str = "complete", desired: str = "run", **fields: Any) -> Allocation:
    return Allocation(id="a1", job_id="j1", client_status=client_status, desired_status=desired, **fields)


def events(*task_events: dict[str, Any]) -> dict[str, Any]:
    return {"TaskStates": {"task": {"State": "dead", "Events": list(task_events)}}}


OOM = {"Type": "Terminated", "Details": {"oom_killed": "true"}}


def test_a_migrated_allocation_ended_because_its_node_drained() -> None:
    assert end_reason(alloc(desired_description="alloc is being migrated")) == REASON_DRAINED
    assert end_reason(alloc(desired_description="alloc was rescheduled")) == REASON_ALLOCATION_STOPPED


def test_a_lost_allocation_ended_because_its_node_went_down() -> None:
    assert end_reason(alloc("lost")) == REASON_NODE_DOWN
    assert end_reason(alloc("failed")) == REASON_ALLOCATION_STOPPED


def test_an_allocation_whose_last_termination_was_an_oom_kill_was_oom_killed() -> None:
    assert end_reason(alloc("failed", raw=events(OOM))) == REASON_OOM
    assert REASON_OOM == "the allocation was OOM Killed", "Poseidon's text, which its clients match"


@pytest.mark.parametrize(
    "task_events",
    [
        (),
        ({"Type": "Terminated", "Details": {"oom_killed": "false"}},),
        ({"Type": "Terminated"},),
        ({"Type": "Killed", "Details": {"oom_killed": "true"}},),
        (OOM, {"Type": "Restarting"}, {"Type": "Terminated", "Details": {"oom_killed": "false"}}),
    ],
)
def test_any_other_end_is_a_stopped_allocation(task_events: tuple[dict[str, Any], ...]) -> None:
    assert end_reason(alloc("failed", raw=events(*task_events))) == REASON_ALLOCATION_STOPPED


def test_the_oom_kill_of_any_task_counts_and_only_the_last_termination_of_each() -> None:
    raw = {
        "TaskStates": {
            "first": {"Events": [{"Type": "Terminated", "Details": {"oom_killed": "false"}}]},
            "second": {"Events": [{"Type": "Terminated", "Details": {"oom_killed": "false"}}, OOM]},
        }
    }
    assert end_reason(alloc("failed", raw=raw)) == REASON_OOM


@pytest.mark.parametrize(
    ("client_status", "desired", "live", "running"),
    [
        ("running", "run", True, True),
        ("pending", "run", True, False),
        ("running", "stop", False, False),
        ("running", "evict", False, False),
        ("complete", "run", False, False),
        ("failed", "run", False, False),
        ("lost", "run", False, False),
    ],
)
def test_live_is_neither_side_terminal_and_running_is_live_and_reported_running(
    client_status: str, desired: str, live: bool, running: bool
) -> None:
    allocation = alloc(client_status, desired)
    assert is_live(allocation) is live
    assert is_running(allocation) is running


def test_the_restart_delay_is_the_longest_of_the_tasks_that_restart_in_seconds() -> None:
    raw = {
        "TaskStates": {
            "a": {"Events": [{"Type": "Restarting", "StartDelay": 1_500_000_000}]},
            "b": {"Events": [{"Type": "Restarting", "StartDelay": 2_500_000_000}]},
            "c": {"Events": [{"Type": "Restarting", "StartDelay": 9_000_000_000}, {"Type": "Started"}]},
            "d": {"Events": []},
        }
    }
    assert restart_delay(alloc("running", raw=raw)) == 2.5


def test_no_restarting_task_or_no_task_states_is_no_delay() -> None:
    assert restart_delay(alloc("running")) == 0.0
    assert restart_delay(alloc("running", raw=events({"Type": "Started"}))) == 0.0


def test_task_states_nomad_should_not_have_sent_are_no_delay() -> None:
    assert restart_delay(alloc("running", raw={"TaskStates": {"task": {"Events": "not a list"}}})) == 0.0
