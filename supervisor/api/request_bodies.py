"""Every request body of the API, and the one place each is read: ``read_body``.

Each body is a frozen class of ``body_field``s (``body_fields.py``): the same declaration checks a
request's body and gives the OpenAPI document its schema. ``read_body`` decodes the bytes
(``request_json.py``) and reads them into the class, so that whatever is wrong with a body, its
JSON or any field at any depth, is an InvalidRequest (400) naming the field, before the request
touches a runner or Nomad.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeVar

from attrs import Factory, frozen

from ..base.errors import InvalidRequest
from ..core.commands import MAX_COMMAND_BYTES, validate_command
from ..core.environments import MAX_AMOUNT, MAX_ID, ExecutionEnvironment
from .body_fields import Array, Base64, Boolean, Integer, Model, Number, StringMap, Text, body_field
from .request_json import read_json

__all__ = [
    "ENVIRONMENT",
    "EXECUTION",
    "FILE_PATCH",
    "MAX_POOL_SIZE",
    "RUNNER_CLAIM",
    "EnvironmentBody",
    "ExecutionBody",
    "FileCopy",
    "FilePatch",
    "RunnerClaim",
    "read_body",
]

T = TypeVar("T")
MAX_POOL_SIZE: Final = 10_000
_WORKSPACE_PATH: Final = "From the workspace, or absolute inside it"


@frozen(kw_only=True)
class RunnerClaim:
    """``POST /runners``: claim an idle runner of an environment."""

    execution_environment_id: int = body_field(
        "executionEnvironmentId", Integer(0, MAX_ID), "The execution environment of the runner"
    )
    inactivity_timeout: int = body_field(
        "inactivityTimeout",
        Integer(0, MAX_AMOUNT),
        "Seconds without an execution or file operation after which the runner is destroyed; 0: never",
        default=0,
    )


@frozen(kw_only=True)
class ExecutionBody:
    """``POST /runners/{runnerId}/execute``: what to run, and how."""

    command: str = body_field(
        "command",
        Text(blank=False, refuses="'", refused="a single quotation mark (')", max_length=MAX_COMMAND_BYTES),
        "A shell command, not blank; with its variables, at most 100,000 bytes",
    )
    privileged_execution: bool = body_field(
        "privilegedExecution", Boolean(), "Run as the task's user, not under the wrapper", default=False
    )
    environment: Mapping[str, str] = body_field(
        "environment",
        StringMap(nullable=True),
        "Variables for the command, besides CODEOCEAN=true; names [A-Za-z_][A-Za-z0-9_]*",
        default=Factory(dict),
    )
    time_limit: int = body_field(
        "timeLimit", Integer(0, MAX_AMOUNT), "Seconds until the command is stopped; 0: never", default=0
    )

    def __attrs_post_init__(self) -> None:
        validate_command(self.command, self.environment)


@frozen(kw_only=True)
class FileCopy:
    """One file (or, with a path ending in "/", a directory) to write in the workspace."""

    path: str = body_field("path", Text(), f"{_WORKSPACE_PATH}; ending in / for a directory")
    content: bytes = body_field("content", Base64(), "The file's content; none: empty", default=b"")


@frozen(kw_only=True)
class FilePatch:
    """``PATCH /runners/{runnerId}/files``: paths to delete, then files to copy."""

    delete: tuple[str, ...] = body_field(
        "delete",
        Array(Text(), nullable=True),
        "Paths to delete, each taken literally; ./* clears the workspace",
        default=(),
    )
    copy: tuple[FileCopy, ...] = body_field(
        "copy", Array(Model(FileCopy), nullable=True), "Files to write, after the deletions", default=()
    )


@frozen(kw_only=True)
class EnvironmentBody:
    """``PUT /execution-environments/{executionEnvironmentId}``: the environment, whole."""

    id: int | None = body_field(
        "id",
        Integer(0, MAX_ID),
        "The ID of the execution environment (in a PUT, the path's, if given)",
        default=None,
    )
    image: str = body_field("image", Text(blank=False), "The OCI image")
    prewarming_pool_size: int = body_field(
        "prewarmingPoolSize", Integer(0, MAX_POOL_SIZE), "Idle runners to keep"
    )
    cpu_limit: float = body_field("cpuLimit", Number(0, MAX_AMOUNT), "CPU of one runner in MHz")
    memory_limit: int = body_field("memoryLimit", Integer(1, MAX_AMOUNT), "Memory of one runner in MB")
    network_access: bool = body_field("networkAccess", Boolean(), "Whether runners reach the network")
    exposed_ports: tuple[int, ...] = body_field(
        "exposedPorts", Array(Integer(1, 65535)), "Ports of a runner to map to its node's"
    )

    def environment(self, environment_id: int) -> ExecutionEnvironment:
        """The environment of ID ``environment_id`` (the path's), which the body's must be if given."""
        if self.id is not None and self.id != environment_id:
            raise InvalidRequest(f"id {self.id} does not match the path's {environment_id}")
        return ExecutionEnvironment(
            id=environment_id,
            image=self.image.strip(),
            prewarming_pool_size=self.prewarming_pool_size,
            cpu_limit=self.cpu_limit,
            memory_limit=self.memory_limit,
            network_access=self.network_access,
            exposed_ports=self.exposed_ports,
        )


RUNNER_CLAIM: Final = Model(RunnerClaim)
EXECUTION: Final = Model(ExecutionBody)
FILE_PATCH: Final = Model(FilePatch)
ENVIRONMENT: Final = Model(EnvironmentBody, component="ExecutionEnvironmentBody")


def read_body(body: bytes, model: Model[T]) -> T:
    """The request's body as ``model``'s class: InvalidRequest (400) naming the field if it is not one."""
    return model.read(read_json(body))
