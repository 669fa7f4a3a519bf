"""The only code that talks to Nomad: typed models, the REST client, the event stream, exec."""

from __future__ import annotations

from .client import Indexed, NomadClient
from .decode import decode_batch, structure, structure_list
from .events import EventStream, StreamStatistics, open_event_stream
from .exec import ExecExited, ExecOutput, ExecSession, open_exec
from .models import (
    EVENT_TYPES_NODE_ELIGIBILITY,
    AllocatedResources,
    Allocation,
    AllocListStub,
    DesiredTransition,
    DrainStrategy,
    Evaluation,
    Event,
    EventBatch,
    Job,
    JobListStub,
    Node,
    NodeEvent,
    NodeListStub,
    PortMapping,
    TaskEvent,
    TaskState,
)
from .settings import DEFAULT_NOMAD_ADDR, NomadSettings, RetryPolicy

__all__ = [
    "DEFAULT_NOMAD_ADDR",
    "EVENT_TYPES_NODE_ELIGIBILITY",
    "AllocListStub",
    "AllocatedResources",
    "Allocation",
    "DesiredTransition",
    "DrainStrategy",
    "Evaluation",
    "Event",
    "EventBatch",
    "EventStream",
    "ExecExited",
    "ExecOutput",
    "ExecSession",
    "Indexed",
    "Job",
    "JobListStub",
    "Node",
    "NodeEvent",
    "NodeListStub",
    "NomadClient",
    "NomadSettings",
    "PortMapping",
    "RetryPolicy",
    "StreamStatistics",
    "TaskEvent",
    "TaskState",
    "decode_batch",
    "open_event_stream",
    "open_exec",
    "structure",
    "structure_list",
]
