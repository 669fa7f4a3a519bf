"""A NomadApi whose every call fails the test: a double overrides only the calls its test expects."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn

from supervisor.nomad import (
    Allocation,
    AllocListStub,
    EventStream,
    Indexed,
    Job,
    JobListStub,
    Node,
    NodeListStub,
)
from supervisor.nomad.agents import AgentLocator, NoAgents
from supervisor.nomad.api import TerminalChannel
from supervisor.nomad.events import EventCounts
from supervisor.nomad.models import JobDeregisterResponse, JobRegisterResponse


def _unexpected(call: str) -> NoReturn:
    raise AssertionError(f"this test does not expect {call}")


class NomadDouble:
    """Satisfies ``NomadApi``; every call is unexpected until a subclass says otherwise."""

    address = "http://nomad.invalid:4646"

    def __init__(self) -> None:
        self.agents: AgentLocator = NoAgents()
        self.exec_paths: Counter[str] = Counter()
        self.nomad_events = EventCounts()

    def located(self, locator: AgentLocator) -> NomadDouble:
        """The double itself, told where allocations' agents run (it has none to reach)."""
        self.agents = locator
        return self

    def rotate_address(self) -> None:
        _unexpected("rotate_address")

    async def register_job(self, job: Mapping[str, Any]) -> JobRegisterResponse:
        _unexpected("register_job")

    async def deregister_job(self, job_id: str, *, purge: bool = False) -> JobDeregisterResponse:
        _unexpected("deregister_job")

    async def read_job(self, job_id: str) -> Indexed[dict[str, Any]]:
        _unexpected("read_job")

    async def list_jobs(
        self, prefix: str = "", *, meta: bool = False, per_page: int | None = None
    ) -> Indexed[list[JobListStub]]:
        _unexpected("list_jobs")

    async def get_job(self, job_id: str) -> Indexed[Job]:
        _unexpected("get_job")

    async def list_nodes(self) -> Indexed[list[NodeListStub]]:
        _unexpected("list_nodes")

    async def get_node(self, node_id: str) -> Indexed[Node]:
        _unexpected("get_node")

    async def list_allocations(
        self,
        *,
        resources: bool = True,
        task_states: bool = True,
        filter: str = "",
        per_page: int | None = None,
        lean: bool = False,
    ) -> Indexed[list[AllocListStub]]:
        _unexpected("list_allocations")

    async def get_allocation(self, alloc_id: str) -> Indexed[Allocation]:
        _unexpected("get_allocation")

    async def leader(self, *, attempts: int | None = None, http_timeout: float | None = None) -> str:
        _unexpected("leader")

    @asynccontextmanager
    async def open_event_stream(
        self, topics: Mapping[str, str | list[str]], *, index: int = 0, heartbeat_timeout: float = 0
    ) -> AsyncIterator[EventStream]:
        _unexpected("open_event_stream")
        yield

    @asynccontextmanager
    async def open_exec(
        self, alloc_id: str, *, task: str, command: Sequence[str], tty: bool = False
    ) -> AsyncIterator[TerminalChannel]:
        _unexpected("open_exec")
        yield
