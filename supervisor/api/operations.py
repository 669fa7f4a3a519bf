"""Every operation of the API, by the name of its route (``create_app`` names each route so): its
prose, its parameters, its body and its answers. ``openapi.py`` writes the document from the routes
and this table; the handlers read their parameters through the same declarations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from attrs import frozen

from ..base.errors import InvalidRequest
from ..core.environments import MAX_ID, decimal
from .body_fields import Model
from .request_bodies import ENVIRONMENT, EXECUTION, FILE_PATCH, RUNNER_CLAIM
from .response_bodies import (
    CLIENT_ERROR,
    ENVIRONMENT_LIST,
    ENVIRONMENT_STATISTICS,
    EXECUTION_ENVIRONMENT,
    EXECUTION_URL,
    FILE_LISTING,
    PROVIDED_RUNNER,
    SERVER_ERROR,
)

__all__ = [
    "DOWNLOAD_PATH",
    "ENVIRONMENT_ID",
    "EXECUTION_ID",
    "FALSE_VALUES",
    "FETCH",
    "LISTING_PATH",
    "OPERATIONS",
    "PATH_PARAMETERS",
    "PRIVILEGED",
    "RECURSIVE",
    "RUNNER_ID",
    "TRUE_VALUES",
    "Answer",
    "BooleanQuery",
    "Link",
    "Operation",
    "TextQuery",
]

# What a boolean query parameter takes, as Poseidon (Go's strconv.ParseBool) reads it.
TRUE_VALUES: Final = ("1", "t", "T", "TRUE", "true", "True")
FALSE_VALUES: Final = ("0", "f", "F", "FALSE", "false", "False")
_JSON: Final = "application/json"


@frozen
class BooleanQuery:
    """A boolean query parameter, read as Poseidon reads it; empty is absent."""

    name: str
    default: bool
    description: str

    def read(self, query: Mapping[str, str]) -> bool:
        """The parameter's value in a request's query."""
        raw = query.get(self.name)
        if raw is None or raw == "":
            return self.default
        if raw in TRUE_VALUES:
            return True
        if raw in FALSE_VALUES:
            return False
        raise InvalidRequest(f"query parameter {self.name} must be true or false, got {raw!r}")

    def parameter(self) -> dict[str, Any]:
        """The parameter as the document describes it."""
        values = [*TRUE_VALUES, *FALSE_VALUES, ""]
        schema = {"type": "string", "enum": values, "default": str(self.default).lower()}
        return {
            "name": self.name,
            "in": "query",
            "required": False,
            "description": self.description,
            "schema": schema,
        }


@frozen
class TextQuery:
    """A string query parameter; empty is absent (then ``default``, or a 400 if ``required``)."""

    name: str
    description: str
    required: bool = False
    default: str = ""

    def read(self, query: Mapping[str, str]) -> str:
        """The parameter's value in a request's query."""
        raw = query.get(self.name) or self.default
        if self.required and not raw:
            raise InvalidRequest(f"query parameter {self.name} is required")
        return raw

    def parameter(self) -> dict[str, Any]:
        """The parameter as the document describes it."""
        schema = {"type": "string", **({"default": self.default} if self.default else {})}
        return {
            "name": self.name,
            "in": "query",
            "required": self.required,
            "description": self.description,
            "schema": schema,
        }


@frozen
class EnvironmentIdParameter:
    """A path's ``{executionEnvironmentId}`` (``{environment_id}`` in the app's routes): an integer
    of ASCII digits up to Go's int."""

    name: str = "executionEnvironmentId"
    route_name: str = "environment_id"

    def read(self, path_params: Mapping[str, Any]) -> int:
        """The ID in a request's path, or InvalidRequest."""
        raw = str(path_params[self.route_name])
        value = decimal(raw)
        if value is None or value > MAX_ID:
            raise InvalidRequest(f"{self.name} must be an integer from 0 to {MAX_ID}, got {raw!r}")
        return value

    def parameter(self) -> dict[str, Any]:
        """The parameter as the document describes it."""
        schema = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
        return {"name": self.name, "in": "path", "required": True, "schema": schema}


@frozen
class RunnerIdParameter:
    """A path's ``{runnerId}`` (``{runner_id}`` in the app's routes): the runner's Nomad job ID."""

    name: str = "runnerId"
    route_name: str = "runner_id"

    def read(self, path_params: Mapping[str, Any]) -> str:
        """The ID in a request's path."""
        return str(path_params[self.route_name])

    def parameter(self) -> dict[str, Any]:
        """The parameter as the document describes it."""
        schema = {"type": "string", "pattern": "^[^/]+$"}
        return {"name": self.name, "in": "path", "required": True, "schema": schema}


RUNNER_ID: Final = RunnerIdParameter()
ENVIRONMENT_ID: Final = EnvironmentIdParameter()
# By their names in the app's routes.
PATH_PARAMETERS: Final[Mapping[str, RunnerIdParameter | EnvironmentIdParameter]] = {
    RUNNER_ID.route_name: RUNNER_ID,
    ENVIRONMENT_ID.route_name: ENVIRONMENT_ID,
}
FETCH: Final = BooleanQuery("fetch", False, "Read the environments from Nomad first, not from memory")
RECURSIVE: Final = BooleanQuery("recursive", True, "List the directories under the path too")
PRIVILEGED: Final = BooleanQuery(
    "privilegedExecution", False, "Read as the task's user, not under execution.unprivileged_wrapper"
)
LISTING_PATH: Final = TextQuery(
    "path",
    "The directory or file to list: relative to the workspace, or absolute (anywhere in the container, "
    "listed as Poseidon lists it)",
    default="./",
)
DOWNLOAD_PATH: Final = TextQuery(
    "path",
    "The file to download: relative to the workspace, or absolute (anywhere in the container)",
    required=True,
)
EXECUTION_ID: Final = TextQuery("executionID", "The execution, from its websocketUrl", required=True)


@frozen
class Link:
    """An answer that gives an ID: it links to every operation that takes that ID, in its path or body."""

    parameter: str
    expression: str


@frozen(kw_only=True)
class Answer:
    """One status of an operation: its prose and its content, a JSON body's model or a schema."""

    description: str
    model: Model[Any] | None = None
    schema: Mapping[str, Any] | None = None
    media_type: str = _JSON
    link: Link | None = None


@frozen(kw_only=True)
class Operation:
    """An operation's prose and shape. The shared error answers it may give are its ``errors`` by
    status; a body adds 400 and 413, the token 401."""

    summary: str
    tag: str
    answers: Mapping[str, Answer]
    errors: tuple[int, ...] = ()
    body: Model[Any] | None = None
    query: tuple[BooleanQuery | TextQuery, ...] = ()
    token: bool = True
    description: str = ""


_RUNNER: Final = "runner"
_ENVIRONMENT: Final = "execution environment"
_MISCELLANEOUS: Final = "miscellaneous"
# What a runner's operations may answer besides their own: a wrong parameter, no route or no such
# execution, a runner that is gone, and a failure of Nomad.
_ON_RUNNER: Final = (400, 404, 410, 500)
_RUNNER_LINK: Final = Link("runnerId", "$response.body#/runnerId")
_ENVIRONMENT_LINK: Final = Link("executionEnvironmentId", "$request.path.executionEnvironmentId")
_OBJECT: Final = {"type": "object"}

OPERATIONS: Final[Mapping[str, Operation]] = {
    "health": Operation(
        summary="Whether the daemon serves: the event stream up and no prewarming pool depleting",
        tag=_MISCELLANEOUS,
        token=False,
        answers={
            "204": Answer(description="Everything is okay"),
            "503": Answer(
                description="Nomad is unreachable, or a prewarming pool is depleting", model=SERVER_ERROR
            ),
        },
    ),
    "healthReady": Operation(
        summary="Whether a load balancer may send this daemon traffic: it acts and serves claims",
        tag=_MISCELLANEOUS,
        token=False,
        description="For a load balancer's health check. Unlike the health route it ignores the pools "
        "and the faults (a pool that refills, an environment Nomad refuses): only the daemon's role "
        "and phase change it.",
        answers={
            "204": Answer(
                description="This daemon acts (alone, or as the active one of an HA pair) and serves claims"
            ),
            "503": Answer(
                description="The standby of an HA pair (STANDBY), starting until its first listing of Nomad "
                "is reconciled (STARTING), or stopping from the moment its graceful stop began (STOPPING)",
                model=SERVER_ERROR,
            ),
        },
    ),
    "healthDetails": Operation(
        summary="Every check the health probe reads, with its figures",
        tag=_MISCELLANEOUS,
        answers={"200": Answer(description="The checks", schema=_OBJECT)},
    ),
    "metrics": Operation(
        summary="Prometheus metrics",
        tag=_MISCELLANEOUS,
        token=False,
        answers={
            "200": Answer(description="The metrics", schema={"type": "string"}, media_type="text/plain")
        },
    ),
    "version": Operation(
        summary="The daemon's release",
        tag=_MISCELLANEOUS,
        token=False,
        answers={
            "200": Answer(description="The release", schema={"type": "string"}),
            "404": Answer(description="No version is set"),
        },
    ),
    "openapi": Operation(
        summary="This document",
        tag=_MISCELLANEOUS,
        token=False,
        answers={"200": Answer(description="The document", schema=_OBJECT)},
    ),
    "statistics": Operation(
        summary="Each environment's runners, idle and used",
        tag=_MISCELLANEOUS,
        answers={
            "200": Answer(
                description="Each environment's runners, by its ID",
                schema={"type": "object", "additionalProperties": ENVIRONMENT_STATISTICS.schema()},
            )
        },
    ),
    "provideRunner": Operation(
        summary="Claim an idle runner of an environment",
        description="Never waits for a runner to start: with no idle runner it answers 500 NOMAD_OVERLOAD.",
        tag=_RUNNER,
        body=RUNNER_CLAIM,
        errors=(404, 500),
        answers={"200": Answer(description="The runner", model=PROVIDED_RUNNER, link=_RUNNER_LINK)},
    ),
    "destroyRunner": Operation(
        summary="Give the runner back; it is destroyed",
        tag=_RUNNER,
        errors=(404, 410),
        answers={"204": Answer(description="Given back")},
    ),
    "listFiles": Operation(
        summary="List the workspace, a path in it, or an absolute path in the container",
        tag=_RUNNER,
        query=(RECURSIVE, LISTING_PATH, PRIVILEGED),
        errors=(*_ON_RUNNER, 424),
        answers={"200": Answer(description="The entries", model=FILE_LISTING)},
    ),
    "updateFiles": Operation(
        summary="Delete, then copy, files in the workspace",
        tag=_RUNNER,
        body=FILE_PATCH,
        errors=_ON_RUNNER,
        answers={"204": Answer(description="Done")},
    ),
    "downloadFile": Operation(
        summary="Download a file, streamed, with its Content-Length when its size is known",
        tag=_RUNNER,
        query=(DOWNLOAD_PATH, PRIVILEGED),
        errors=(*_ON_RUNNER, 424),
        answers={
            "200": Answer(
                description="The file",
                schema={"type": "string", "format": "binary"},
                media_type="application/octet-stream",
            )
        },
    ),
    "execute": Operation(
        summary="Prepare an execution; its WebSocket URL is single-use and bound to the runner",
        tag=_RUNNER,
        body=EXECUTION,
        errors=_ON_RUNNER,
        answers={"200": Answer(description="The WebSocket URL to connect to", model=EXECUTION_URL)},
    ),
    "connectExecution": Operation(
        summary="Run the prepared execution over a WebSocket",
        description="The protocol of websocket.schema.json; a message over server.max_message closes it "
        "with 1009.",
        tag=_RUNNER,
        query=(EXECUTION_ID,),
        errors=(404, 410, 500),
        answers={
            "101": Answer(description="Switching protocols"),
            "426": Answer(description="A request without a WebSocket upgrade", model=CLIENT_ERROR),
        },
    ),
    "listEnvironments": Operation(
        summary="List the execution environments",
        tag=_ENVIRONMENT,
        query=(FETCH,),
        errors=(400, 500),
        answers={"200": Answer(description="Every environment", model=ENVIRONMENT_LIST)},
    ),
    "getEnvironment": Operation(
        summary="Show an execution environment",
        tag=_ENVIRONMENT,
        query=(FETCH,),
        errors=(400, 404, 500),
        answers={"200": Answer(description="The environment", model=EXECUTION_ENVIRONMENT)},
    ),
    "putEnvironment": Operation(
        summary="Create or replace an execution environment",
        description="Its idle runners are replaced at once, its used ones when their clients give them back.",
        tag=_ENVIRONMENT,
        body=ENVIRONMENT,
        errors=(500,),
        answers={
            "201": Answer(description="Created", link=_ENVIRONMENT_LINK),
            "204": Answer(description="Replaced", link=_ENVIRONMENT_LINK),
        },
    ),
    "deleteEnvironment": Operation(
        summary="Delete an execution environment and its runners",
        tag=_ENVIRONMENT,
        errors=(400, 404, 500),
        answers={"204": Answer(description="Deleted")},
    ),
}
