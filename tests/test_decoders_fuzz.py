"""The decoders take anything: arbitrary bytes, truncated and oversized lines, wrong types in every
field, unknown topics and types. Never a crash and never a stuck task: a batch, a heartbeat, a
logged and counted skip, or a typed error.

The examples are kept small so that the test command stays fast; raise ``HYPOTHESIS_MAX_EXAMPLES``
to run them longer.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import cattrs
import httpx
import orjson
import pytest
import trio
import trio_websocket
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.base.errors import EventStreamError, ExecConnectionLost
from supervisor.nomad import (
    AllocatedResources,
    Allocation,
    AllocListStub,
    EventBatch,
    ExecExited,
    ExecOutput,
    Job,
    JobListStub,
    Node,
    decode_batch,
)
from supervisor.nomad.decode import _checked, _converter, _make_converter, nomad_key
from supervisor.nomad.events import EventStream
from supervisor.nomad.exec import ExecSession

EXAMPLES = settings(max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "200")), deadline=None)
FIXTURES = Path(__file__).parent / "fixtures"
LINES = [
    line
    for name in ("event_stream_example.ndjson", "event_types.ndjson")
    for line in (FIXTURES / name).read_bytes().splitlines()
    if line.strip() not in (b"", b"{}")
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value``."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += _paths(inner, (*prefix, i))
    return found


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    """A realistic batch with one to three of its fields, at any depth, replaced by any JSON value."""
    batch = orjson.loads(draw(st.sampled_from(LINES)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(batch)))
        replacement = draw(json_values)
        if not path:
            batch = replacement
            continue
        target = batch
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = replacement
    return orjson.dumps(batch)


def _decoded(line: bytes) -> EventBatch | None:
    try:
        return decode_batch(line)
    except ValueError:
        return None


@EXAMPLES
@given(st.binary(max_size=300))
def test_any_bytes_are_a_batch_a_heartbeat_or_a_value_error(line: bytes) -> None:
    _decoded(line)


@EXAMPLES
@given(mutated_batches())
def test_wrong_types_anywhere_are_a_value_error_or_a_well_typed_batch(line: bytes) -> None:
    batch = _decoded(line)
    if batch is None:
        return
    assert type(batch.index) is int
    for event in batch.events:
        assert isinstance(event.topic, str)
        assert isinstance(event.type, str)
        assert isinstance(event.key, str)
        assert isinstance(event.namespace, str)
        assert type(event.index) is int
        assert all(isinstance(key, str) for key in event.filter_keys)
        _assert_what_the_supervisor_reads_is_well_typed(event.payload)


def _assert_what_the_supervisor_reads_is_well_typed(payload: object) -> None:
    """What the pool and the node tracker read of a payload was checked when it was decoded."""
    if isinstance(payload, Allocation):
        texts = (payload.id, payload.job_id, payload.node_id, payload.client_status, payload.next_allocation)
        assert all(
            type(text) is str for text in (*texts, payload.desired_status, payload.desired_description)
        )
        assert type(payload.create_index) is int
        assert type(payload.modify_index) is int
        for port in payload.ports:
            assert type(port.label) is str
            assert type(port.host_ip) is str
            assert type(port.value) is int
            assert type(port.to) is int
    elif isinstance(payload, Job):
        assert type(payload.id) is str
        assert type(payload.stop) is bool
    elif isinstance(payload, Node):
        texts = (payload.id, payload.name, payload.status, payload.http_addr, payload.scheduling_eligibility)
        assert all(type(text) is str for text in texts)
        assert type(payload.drain) is bool
        assert type(payload.tls_enabled) is bool
        assert type(payload.modify_index) is int
        assert all(type(event.message) is str for event in payload.events)
        strategy = payload.drain_strategy
        assert strategy is None or isinstance(strategy.force_deadline, datetime | None)


GENERATED = _make_converter(hand_written=False)
HAND_WRITTEN = [
    (Allocation, "allocation_running_replacement.json"),
    (AllocListStub, "allocations_list_resources.json"),
    (Job, "job_runner.json"),
    (JobListStub, "jobs_list.json"),
    (Node, "node_draining.json"),
]


@st.composite
def hand_written_inputs(draw: st.DrawFn) -> tuple[type[Any], Any]:
    """A model with a hand-written decoder, and one of its fixtures with one to three of its fields,
    at any depth, replaced by any JSON value."""
    model, name = draw(st.sampled_from(HAND_WRITTEN))
    value = orjson.loads((FIXTURES / name).read_bytes())
    if isinstance(value, list):
        value = draw(st.sampled_from(value))
    if model is Allocation and draw(st.booleans()):
        model, value = AllocatedResources, value["AllocatedResources"]
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(value)
        top = [path for path in paths if len(path) == 1] or paths
        value = _replaced(value, draw(st.sampled_from(top) | st.sampled_from(paths)), draw(json_values))
    return model, value


def _replaced(value: Any, path: tuple[Any, ...], replacement: Any) -> Any:
    if not path:
        return replacement
    target = value
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = replacement
    return value


def _outcome(converter: cattrs.Converter, model: type[Any], value: Any) -> object:
    try:
        return _checked(converter, model.__name__, model)(value)
    except ValueError:
        return ValueError


@EXAMPLES
@given(hand_written_inputs())
def test_hand_written_decoders_agree_with_the_generated_ones(example: tuple[type[Any], Any]) -> None:
    model, value = example
    assert _outcome(_converter, model, value) == _outcome(GENERATED, model, value)


def _stream(chunks: list[bytes], *, max_line_bytes: int = 4096) -> EventStream:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    response = httpx.Response(200, content=body())
    return EventStream(response, heartbeat_timeout=45, max_line_bytes=max_line_bytes, start_index=1)


lines = st.one_of(
    st.sampled_from(LINES),
    mutated_batches(),
    st.binary(max_size=100),
    st.just(b"{}"),
    st.just(b"x" * 5000),  # over the line limit
)


@EXAMPLES
@given(st.lists(lines, max_size=6), st.data())
async def test_a_stream_of_anything_ends_with_a_typed_error_and_counts_what_it_skipped(
    body: list[bytes], data: st.DataObject
) -> None:
    raw = b"\n".join(body)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=4)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    stream = _stream(chunks)
    batches = 0
    with trio.fail_after(5), pytest.raises(EventStreamError) as ended:
        while True:
            await stream.receive()
            batches += 1
    assert ended.value.last_index >= 0
    skipped = stream.statistics.malformed_lines
    # Each line is a batch, a heartbeat or skipped, at most once; a drawn piece of binary may hold
    # newlines of its own, so the lines are counted in what was sent.
    assert batches + skipped + stream.statistics.heartbeats <= raw.count(b"\n") + 1


class _Frames:
    """A WebSocket connection that yields the given messages, then closes normally."""

    def __init__(self, messages: list[str | bytes]) -> None:
        self.messages = messages

    async def get_message(self) -> str | bytes:
        if not self.messages:
            raise trio_websocket.ConnectionClosed(trio_websocket.CloseReason(1000, None))
        return self.messages.pop(0)


frames = st.one_of(
    st.binary(max_size=60),
    st.text(max_size=60),
    json_values.map(lambda v: orjson.dumps(v).decode()),
    st.fixed_dictionaries(
        {"exited": json_values, "result": json_values}, optional={"stdout": json_values}
    ).map(lambda v: orjson.dumps(v).decode()),
    st.fixed_dictionaries({"stdout": st.fixed_dictionaries({"data": json_values, "close": json_values})}).map(
        lambda v: orjson.dumps(v).decode()
    ),
)


@EXAMPLES
@given(st.lists(frames, max_size=6))
async def test_exec_frames_of_any_shape_are_output_an_exit_or_skipped(messages: list[str | bytes]) -> None:
    session = ExecSession(_Frames(list(messages)), "a fuzzed session")  # type: ignore[arg-type]
    ended: list[str] = []
    with trio.fail_after(5):
        try:
            async for frame in session:
                assert isinstance(frame, ExecOutput | ExecExited)
                if isinstance(frame, ExecExited):
                    assert type(frame.exit_code) is int
                    assert type(frame.signal) is int
                    ended.append("exited")
        except ExecConnectionLost:  # closed before a valid exit; anything else fails the test
            ended.append("lost")
    assert len(ended) == 1


ODD_VALUES = [None, 0, 1, -1, "", "x", True, False, 1.5, [], ["x"], [None], {}, {"x": 1}]


@pytest.mark.parametrize(("model", "name"), HAND_WRITTEN)
def test_hand_written_decoders_agree_with_the_generated_ones_on_every_field(
    model: type[Any], name: str
) -> None:
    """Every field at any depth of the fixture, and every key of the model, replaced by (or set to)
    each kind of JSON value."""
    original = orjson.loads((FIXTURES / name).read_bytes())
    original = original[0] if isinstance(original, list) else original
    keys = [
        (a.metadata.get("key") or nomad_key(a.name),)
        for a in attrs.fields(model)
        if not a.metadata.get("raw")
    ]
    for path in {*_paths(original), *keys}:
        for odd in ODD_VALUES:
            value = _replaced(orjson.loads(orjson.dumps(original)), path, odd)
            assert _outcome(_converter, model, value) == _outcome(GENERATED, model, value), (path, odd)
