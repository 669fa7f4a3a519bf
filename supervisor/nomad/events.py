"""Reading Nomad's event stream (``GET /v1/event/stream``): NDJSON batches and ``{}`` heartbeats.

A stream never ends quietly: ``receive()`` returns the next EventBatch or raises an
EventStreamError subclass that says why the stream is over, carrying the last delivered index so the
caller can resume at ``last_index + 1``. A malformed line in the middle of the stream is logged,
counted and skipped; the text of a non-JSON line that ends the body (how Nomad <= 1.11.1 reports an
error after the 200) is kept in StreamServerError.

httpx's read timeout is off for the stream: Nomad sends a heartbeat only every 30 s, so the reader
enforces its own deadline (``heartbeat_timeout``) on the silence of the server while it waits.

Each event read is counted (``EventCounts``, kept by the client across its streams) by its topic and
type as Nomad names them, for ``/metrics``; a name outside Nomad's own set counts as ``other``, so
that a server (or a proxy) cannot grow the label set.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Final

import httpx
import trio
from attrs import define
from loguru import logger

from ..base.errors import (
    StreamConnectionLost,
    StreamEnded,
    StreamHeartbeatTimeout,
    StreamLineTooLong,
    StreamServerError,
)
from .boundary import release_response, translate_status, translate_transport_errors
from .connection import NomadConnection
from .decode import decode_batch
from .models import EventBatch

__all__ = [
    "NOMAD_EVENT_TOPICS",
    "NOMAD_EVENT_TYPES",
    "OTHER",
    "EventCounts",
    "EventStream",
    "StreamStatistics",
    "open_event_stream",
    "topic_params",
]

DEFAULT_HEARTBEAT_TIMEOUT: Final = 45.0
DEFAULT_MAX_LINE_BYTES: Final = 16 * 1024 * 1024
_ERROR_BODY_LIMIT: Final = 64 * 1024
# The topics and types Nomad 1.10 writes (``nomad/structs/event.go``: its ``Topic*`` and ``Type*``
# constants; the reference's §1.3 and §1.5); any other name is counted as OTHER.
NOMAD_EVENT_TOPICS: Final = frozenset(
    {
        "Job", "Allocation", "Evaluation", "Deployment", "Node", "NodePool", "Service",
        "ACLToken", "ACLPolicy", "ACLRole", "ACLAuthMethod", "ACLBindingRule",
        "HostVolume", "CSIVolume", "CSIPlugin", "Variable", "Operator",
    }
)  # fmt: skip
NOMAD_EVENT_TYPES: Final = frozenset(
    {
        "NodeRegistration", "NodeDeregistration", "NodeEligibility", "NodeDrain", "NodeStreamEvent",
        "DeploymentStatusUpdate", "DeploymentPromotion", "DeploymentAllocHealth",
        "AllocationCreated", "AllocationUpdated", "AllocationUpdateDesiredStatus",
        "EvaluationUpdated", "JobRegistered", "JobDeregistered", "JobBatchDeregistered", "PlanResult",
        "ACLTokenDeleted", "ACLTokenUpserted", "ACLPolicyDeleted", "ACLPolicyUpserted",
        "ACLRoleDeleted", "ACLRoleUpserted", "ACLAuthMethodUpserted", "ACLAuthMethodDeleted",
        "ACLBindingRuleUpserted", "ACLBindingRuleDeleted",
        "ServiceRegistration", "ServiceDeregistration",
        "HostVolumeRegistered", "HostVolumeDeleted",
        "CSIVolumeRegistered", "CSIVolumeDeregistered", "CSIVolumeClaim", "VariableUpdated",
    }
)  # fmt: skip
OTHER: Final = "other"


@define
class StreamStatistics:
    """What one stream has delivered: heartbeats, skipped lines, the last index."""

    heartbeats: int = 0
    malformed_lines: int = 0
    last_index: int = 0


class EventCounts:
    """Events read from Nomad's event streams, by ``(topic, type)``: a dict of counters, updated as
    each batch is read and read at scrape time."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}

    def count(self, batch: EventBatch) -> None:
        """Count the batch's events."""
        counts = self._counts
        for event in batch.events:
            topic = event.topic if event.topic in NOMAD_EVENT_TOPICS else OTHER
            kind = event.type if event.type in NOMAD_EVENT_TYPES else OTHER
            counts[topic, kind] = counts.get((topic, kind), 0) + 1

    def items(self) -> list[tuple[tuple[str, str], int]]:
        """Each ``((topic, type), count)`` counted so far, in order."""
        return sorted(self._counts.items())


def topic_params(topics: Mapping[str, str | list[str]]) -> list[tuple[str, str]]:
    """``{"Job": "*", "Allocation": ["a", "b"]}`` as Nomad's repeated ``topic=Topic:Key`` parameters."""
    params = []
    for topic, keys in topics.items():
        for key in [keys] if isinstance(keys, str) else keys:
            params.append(("topic", f"{topic}:{key}"))
    return params


class EventStream:
    """An open subscription; ``async for batch in stream`` or ``await stream.receive()``."""

    def __init__(
        self,
        response: httpx.Response,
        *,
        heartbeat_timeout: float,
        max_line_bytes: int,
        start_index: int,
        counts: EventCounts | None = None,
    ) -> None:
        self._chunks = response.aiter_bytes()
        self._counts = EventCounts() if counts is None else counts
        self._heartbeat_timeout = heartbeat_timeout
        self._max_line_bytes = max_line_bytes
        self._lines: deque[bytes] = deque()
        self._partial = b""
        self._line_number = 0
        self._finished: Exception | None = None
        self.statistics = StreamStatistics(last_index=max(0, start_index - 1))

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> EventBatch:
        return await self.receive()

    async def receive(self) -> EventBatch:
        """The next batch; heartbeats and malformed lines are consumed on the way."""
        while True:
            line = self._lines.popleft() if self._lines else await self._next_line()
            batch = self._decode(line)
            if batch is not None:
                self.statistics.last_index = batch.index
                self._counts.count(batch)
                return batch

    def _decode(self, line: bytes) -> EventBatch | None:
        self._line_number += 1
        if not line.strip():
            return None
        try:
            batch = decode_batch(line)
        except ValueError as exc:
            self.statistics.malformed_lines += 1
            logger.warning(
                "skipped malformed event-stream line {} after index {}: {} ({!r})",
                self._line_number,
                self.statistics.last_index,
                exc,
                line[:200],
            )
            return None
        if batch is None:
            self.statistics.heartbeats += 1
        return batch

    async def _next_line(self) -> bytes:
        while not self._lines:
            if self._finished is not None:
                raise self._finished
            try:
                chunk = await self._next_chunk()
            except (StreamConnectionLost, StreamHeartbeatTimeout) as exc:
                self._finished = exc
                raise
            if chunk is None:
                self._finish_body()
            else:
                self._split(chunk)
        return self._lines.popleft()

    async def _next_chunk(self) -> bytes | None:
        """The next chunk of the body, or None at its clean end.

        The deadline runs while we wait, so a consumer that reads slowly never mistakes the bytes
        waiting in its socket for a silent server.
        """
        last_index = self.statistics.last_index
        with trio.move_on_after(self._heartbeat_timeout):
            try:
                return await anext(self._chunks)
            except StopAsyncIteration:
                return None
            except httpx.TransportError as exc:
                where = "mid-line" if self._partial else "between lines"
                raise StreamConnectionLost(
                    f"event stream connection lost {where}: {type(exc).__name__}: {exc}",
                    last_index=last_index,
                ) from exc
        raise StreamHeartbeatTimeout(
            f"no event or heartbeat within {self._heartbeat_timeout:g}s", last_index=last_index
        )

    def _split(self, chunk: bytes) -> None:
        lines = chunk.split(b"\n")
        lines[0] = self._partial + lines[0]
        self._partial = lines.pop()
        if len(self._partial) > self._max_line_bytes or any(len(x) > self._max_line_bytes for x in lines):
            self._finished = StreamLineTooLong(
                f"an event-stream line exceeded {self._max_line_bytes} bytes",
                last_index=self.statistics.last_index,
            )
            raise self._finished
        self._lines.extend(lines)

    def _finish_body(self) -> None:
        """The body ended: a trailing unterminated line is either a last batch or Nomad's error text."""
        last_index = self.statistics.last_index
        trailing, self._partial = self._partial.strip(), b""
        self._finished = StreamEnded("Nomad ended the event stream", last_index=last_index)
        if not trailing:
            return
        try:
            decode_batch(trailing)
        except ValueError:
            text = trailing.decode("utf-8", errors="replace")
            self._finished = StreamServerError(text, last_index=last_index)
            return
        self._lines.append(trailing)


@asynccontextmanager
async def open_event_stream(
    client: NomadConnection,
    topics: Mapping[str, str | list[str]],
    *,
    index: int = 0,
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    counts: EventCounts | None = None,
) -> AsyncIterator[EventStream]:
    """Subscribe on the client's current server; the response is closed when the block exits. The
    events read are counted into ``counts`` (the stream's own, when not given)."""
    params: list[tuple[str, str | int | float | bool | None]] = [("index", str(index)), *topic_params(topics)]
    params.extend(client.common_params().items())
    url = client.address + "/v1/event/stream"
    what = "GET /v1/event/stream"
    timeout = httpx.Timeout(client.settings.request_timeout, read=None)
    request = client.http.build_request(
        "GET", url, params=params, timeout=timeout, extensions=client.request_extensions()
    )
    response: httpx.Response | None = None
    with trio.move_on_after(heartbeat_timeout):
        with translate_transport_errors(what):
            response = await client.http.send(request, stream=True)
    if response is None:
        raise StreamHeartbeatTimeout(f"no answer to the subscription within {heartbeat_timeout:g}s")
    try:
        if response.status_code >= 400:
            body = b""
            with translate_transport_errors(what):
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > _ERROR_BODY_LIMIT:
                        break
            error = translate_status(response.status_code, body.decode("utf-8", errors="replace"), what)
            assert error is not None
            raise error
        yield EventStream(
            response,
            heartbeat_timeout=heartbeat_timeout,
            max_line_bytes=max_line_bytes,
            start_index=index,
            counts=counts,
        )
    finally:
        with trio.move_on_after(client.settings.close_timeout, shield=True):
            await response.aclose()
        release_response(response)
