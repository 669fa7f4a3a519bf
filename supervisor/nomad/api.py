"""What the daemon needs of Nomad, as protocols: ``NomadClient`` provides each, and so can a test double.

Each protocol is as small as its users: the factory writes jobs (``JobWriter``), executions and file
commands run commands in a task (``ExecOpener``), and the runner service, which wires them and reads
the cluster's state, needs all of ``NomadApi``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from .agents import AgentLocator
from .client import Indexed
from .events import EventCounts, EventStream
from .exec import ExecExited, ExecOutput
from .models import (
    Allocation,
    AllocListStub,
    Job,
    JobDeregisterResponse,
    JobListStub,
    JobRegisterResponse,
    Node,
    NodeListStub,
)

__all__ = ["ExecChannel", "ExecOpener", "ExecutionClient", "JobWriter", "NomadApi", "TerminalChannel"]


class ExecChannel(Protocol):
    """One running command's session: stdin in; output chunks, then its exit, out."""

    exited: ExecExited | None
    # Who holds the session: the allocation's client "agent", or a "server" that forwards it.
    path: str

    async def send_stdin(self, data: bytes) -> None:
        """Write to the command's stdin."""

    async def close_stdin(self) -> None:
        """Close the command's stdin."""

    def __aiter__(self) -> AsyncIterator[ExecOutput | ExecExited]:
        """Output chunks, ending with one ExecExited."""

    async def wait_exit(self, *, max_output_bytes: int = ...) -> tuple[ExecExited, bytes, bytes]:
        """Read to the end; the exit with stdout and stderr, each cut at ``max_output_bytes``."""


class TerminalChannel(ExecChannel, Protocol):
    """A session that may run its command on a terminal."""

    async def resize(self, *, height: int, width: int) -> None:
        """Tell a session on a terminal its size."""


class ExecOpener(Protocol):
    """Runs commands in an allocation's task."""

    def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str]
    ) -> AbstractAsyncContextManager[ExecChannel]:
        """A session running ``command``; a session that started is never retried."""


class ExecutionClient(ExecOpener, Protocol):
    """Runs commands, and reads their allocation to tell a command's own death from its container's."""

    def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AbstractAsyncContextManager[TerminalChannel]:
        """A session running ``command``, on a terminal with ``tty``."""

    async def get_allocation(self, alloc_id: str) -> Indexed[Allocation]:
        """The full allocation."""
        ...


class JobWriter(Protocol):
    """Writes jobs."""

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        """Register (or update) a job; the answer carries the write's index."""

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        """Stop, or with ``purge`` delete, a job; index 0 for a job Nomad does not know."""

    async def read_job(self, job_id: str) -> Indexed[dict[str, Any]]:
        """The job as Nomad answers ``GET /v1/job/:id``, undecoded: what an update that must
        change nothing else registers back."""
        ...


class NomadApi(JobWriter, ExecOpener, Protocol):
    """Everything the runner service and its children use: writes, exec, listings and the stream."""

    # Exec sessions by the path they took ("agent", "server", "fallback").
    exec_paths: Counter[str]
    # The events read from Nomad's event streams, by topic and type.
    nomad_events: EventCounts

    def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AbstractAsyncContextManager[TerminalChannel]:
        """A session running ``command``, on a terminal with ``tty``."""

    def located(self, locator: AgentLocator) -> NomadApi:
        """This client, told by ``locator`` where each allocation's agent runs."""
        ...

    @property
    def address(self) -> str:
        """The server the next request goes to."""

    def rotate_address(self) -> None:
        """Send the next request to the next server."""

    async def list_jobs(
        self, prefix: str = "", *, meta: bool = False, per_page: int | None = None
    ) -> Indexed[list[JobListStub]]:
        """Job stubs whose ID starts with ``prefix``, read ``per_page`` at a time; with ``meta``, their
        meta too."""

    async def get_job(self, job_id: str) -> Indexed[Job]:
        """The full job."""

    async def list_nodes(self) -> Indexed[list[NodeListStub]]:
        """Every node's stub."""

    async def get_node(self, node_id: str) -> Indexed[Node]:
        """The full node, with its last events."""

    async def list_allocations(
        self,
        *,
        resources: bool = True,
        task_states: bool = True,
        filter: str = "",
        per_page: int | None = None,
        lean: bool = False,
    ) -> Indexed[list[AllocListStub]]:
        """Allocation stubs that match a Nomad filter expression, read ``per_page`` at a time;
        ``lean`` ones keep only the fields decoded at once."""

    async def get_allocation(self, alloc_id: str) -> Indexed[Allocation]:
        """The full allocation."""

    async def leader(self, *, attempts: int | None = None, http_timeout: float | None = None) -> str:
        """The leader's RPC address; "" while the cluster has none."""

    def open_event_stream(
        self, topics: Mapping[str, str | list[str]], *, index: int = 0, heartbeat_timeout: float = ...
    ) -> AbstractAsyncContextManager[EventStream]:
        """One subscription to ``topics`` from ``index``, inclusive; lost after ``heartbeat_timeout``
        seconds without a byte."""
