"""The JSON bodies the API answers with, declared as its request bodies are (``body_fields.py``), so
that the OpenAPI document's schemas of them come from one declaration."""

from __future__ import annotations

from typing import Final

from attrs import frozen

from .body_fields import Array, Choice, Integer, Model, Text, body_field
from .request_bodies import EnvironmentBody

__all__ = [
    "CLIENT_ERROR",
    "ENVIRONMENT_LIST",
    "ENVIRONMENT_STATISTICS",
    "ERROR_CODES",
    "EXECUTION_ENVIRONMENT",
    "EXECUTION_URL",
    "FILE_HEADER",
    "FILE_LISTING",
    "PROVIDED_RUNNER",
    "SERVER_ERROR",
    "ClientError",
    "EnvironmentStatistics",
    "ExecutionUrl",
    "FileHeader",
    "FileListing",
    "ProvidedRunner",
    "ServerError",
]

# Poseidon's error codes, our standby's (HA), and those of /health/ready.
ERROR_CODES: Final = (
    "NOMAD_UNREACHABLE",
    "NOMAD_OVERLOAD",
    "NOMAD_INTERNAL_SERVER_ERROR",
    "PREWARMING_POOL_DEPLETING",
    "UNKNOWN",
    "STANDBY",
    "STARTING",
    "STOPPING",
)
# An environment as the API shows it: the body of its PUT, with its ID always.
EXECUTION_ENVIRONMENT: Final = Model(EnvironmentBody, component="ExecutionEnvironment")
# What a listing's entryType says, as ls -l writes it.
_ENTRY_TYPES: Final = ("-", "b", "c", "d", "l", "p", "s", "?")


@frozen(kw_only=True)
class MappedPort:
    """Where a runner's port is reached from outside."""

    exposed_port: int = body_field("exposedPort", Integer(0, 65535), "The port inside the runner")
    host_address: str = body_field("hostAddress", Text(), "host:port to reach it at")


@frozen(kw_only=True)
class ProvidedRunner:
    """The runner a claim got."""

    runner_id: str = body_field("runnerId", Text(), "The runner's ID, which is its Nomad job's")
    mapped_ports: tuple[MappedPort, ...] = body_field(
        "mappedPorts", Array(Model(MappedPort)), "The environment's exposed ports, mapped"
    )


@frozen(kw_only=True)
class ExecutionUrl:
    """Where a prepared execution runs."""

    websocket_url: str = body_field(
        "websocketUrl", Text(), "The execution's WebSocket: single-use, bound to its runner"
    )


@frozen(kw_only=True)
class FileHeader:
    """One entry of a listing."""

    name: str = body_field("name", Text(), "The path, from the workspace, with ./")
    entry_type: str = body_field("entryType", Choice(_ENTRY_TYPES), "The entry's type, as ls -l writes it")
    link_target: str | None = body_field(
        "linkTarget", Text(), "A link's target, as the link says it", default=None
    )
    size: int = body_field("size", Integer(0), "Bytes")
    modification_time: int = body_field("modificationTime", Integer(), "Unix time")
    permissions: str = body_field("permissions", Text(), "As ls -l writes them: rwxr--r--")
    owner: str = body_field("owner", Text())
    group: str = body_field("group", Text())


@frozen(kw_only=True)
class FileListing:
    """The entries under a path."""

    files: tuple[FileHeader, ...] = body_field("files", Array(Model(FileHeader, component="FileHeader")))


@frozen(kw_only=True)
class EnvironmentList:
    """Every execution environment."""

    execution_environments: tuple[EnvironmentBody, ...] = body_field(
        "executionEnvironments", Array(EXECUTION_ENVIRONMENT)
    )


@frozen(kw_only=True)
class EnvironmentStatistics:
    """One environment's runners."""

    id: int = body_field("id", Integer(0), "The environment's ID")
    prewarming_pool_size: int = body_field("prewarmingPoolSize", Integer(0), "Idle runners to keep")
    idle_runners: int = body_field("idleRunners", Integer(0), "Idle runners now")
    used_runners: int = body_field("usedRunners", Integer(0), "Claimed runners now")


@frozen(kw_only=True)
class ClientError:
    """A refusal of the request: what is wrong with it."""

    message: str = body_field("message", Text(), "What is wrong, naming the field")


@frozen(kw_only=True)
class ServerError:
    """A request that could not be served now: what happened, and a code to act on."""

    message: str = body_field("message", Text(), "What happened")
    error_code: str = body_field("errorCode", Choice(ERROR_CODES), "What happened, for a program")


PROVIDED_RUNNER: Final = Model(ProvidedRunner)
EXECUTION_URL: Final = Model(ExecutionUrl)
FILE_HEADER: Final = Model(FileHeader)
FILE_LISTING: Final = Model(FileListing)
ENVIRONMENT_LIST: Final = Model(EnvironmentList)
ENVIRONMENT_STATISTICS: Final = Model(EnvironmentStatistics)
CLIENT_ERROR: Final = Model(ClientError, component="ClientError")
SERVER_ERROR: Final = Model(ServerError, component="ServerError")
