"""Decoding Nomad's JSON at the edges: lean allocation stubs (what a relist keeps of each), the
message of a value of the wrong type, Nomad's keys of unit-suffixed attributes, zero and null times,
and the batches the event stream may send. Plain sync tests on ``supervisor.nomad.decode``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from supervisor.nomad import AllocListStub, Node, structure
from supervisor.nomad.decode import decode_batch, nomad_key, structure_lean_alloc_stubs

STUB = {
    "ID": "a1",
    "JobID": "10-r1",
    "NodeID": "n1",
    "DesiredStatus": "run",
    "ClientStatus": "running",
    "CreateIndex": 5,
    "ModifyIndex": 7,
    "TaskStates": {"default-task": {"State": "running"}},
}


def test_lean_stubs_keep_what_the_pool_reads_and_not_nomad_s_whole_object() -> None:
    (stub,) = structure_lean_alloc_stubs([STUB])
    assert isinstance(stub, AllocListStub)
    assert (stub.id, stub.job_id, stub.node_id) == ("a1", "10-r1", "n1")
    assert (stub.desired_status, stub.client_status, stub.create_index, stub.modify_index) == (
        "run",
        "running",
        5,
        7,
    )
    assert stub.raw == {}
    assert stub.task_states == {}, "what is decoded on first read is then empty"


def test_a_null_listing_is_no_stub() -> None:
    assert structure_lean_alloc_stubs(None) == []
    assert structure_lean_alloc_stubs([]) == []


def test_a_lean_stub_of_the_wrong_type_names_its_key() -> None:
    with pytest.raises(ValueError, match=r"^ClientStatus must be str, got int$"):
        structure_lean_alloc_stubs([{**STUB, "ClientStatus": 3}])


@pytest.mark.parametrize(
    ("attribute", "key"),
    [
        ("modify_time_ns", "ModifyTime"),
        ("status_updated_at_s", "StatusUpdatedAt"),
        ("eval_id", "EvalID"),
        ("failed_tg_allocs", "FailedTGAllocs"),
        ("http_addr", "HTTPAddr"),
        ("tls_enabled", "TLSEnabled"),
        ("ns_s", "Ns"),
    ],
)
def test_nomad_s_keys_of_attributes(attribute: str, key: str) -> None:
    assert nomad_key(attribute) == key


def test_a_node_s_zero_and_null_times_are_none_and_others_aware() -> None:
    node = structure({"ID": "n1", "DrainStrategy": {"ForceDeadline": "0001-01-01T00:00:00Z"}}, Node)
    assert node.drain_strategy is not None
    assert node.drain_strategy.force_deadline is None
    node = structure({"ID": "n1", "DrainStrategy": {"ForceDeadline": "2026-01-02T03:04:05Z"}}, Node)
    assert node.drain_strategy is not None
    assert node.drain_strategy.force_deadline == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    with pytest.raises(ValueError, match=r"^ForceDeadline must be str, got int$"):
        structure({"ID": "n1", "DrainStrategy": {"ForceDeadline": 5}}, Node)


@pytest.mark.parametrize("line", [b"{}", b'{"Index": 0}', b'{"Events": []}'])
def test_a_batch_without_events_and_index_is_a_heartbeat(line: bytes) -> None:
    assert decode_batch(line) is None


@pytest.mark.parametrize(
    "line",
    [b'{"Index": -1, "Events": [{}]}', b'{"Index": 5, "Events": {}}', b'{"Index": "5", "Events": [{}]}'],
)
def test_a_batch_whose_index_or_events_are_wrong_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError, match="an event batch needs an Index"):
        decode_batch(line)


def test_an_index_of_0_with_events_is_a_batch() -> None:
    batch = decode_batch(b'{"Index": 0, "Events": [{"Topic": "Job", "Type": "JobRegistered"}]}')
    assert batch is not None
    assert batch.index == 0
    assert [(e.topic, e.type) for e in batch.events] == [("Job", "JobRegistered")]
