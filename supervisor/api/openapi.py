"""The OpenAPI document of our API (served at ``/api/v1/openapi.json``).

Every route and shape of Poseidon's swagger.yaml, as this daemon answers it, plus what it adds: the
health details, the metrics, the document itself, the limits (``server.max_body`` as 413, the
bounds of every number), ``Retry-After`` on answers that say Nomad is unreachable, and the file
headers' fields that Poseidon's implementation sends beyond its swagger (permissions, owner, group,
linkTarget). Links let a stateful client follow a runner or an environment from the call that
made it.
"""

from __future__ import annotations

from typing import Any, Final

from ..core.commands import MAX_COMMAND_BYTES
from ..core.config import ServerSettings
from ..core.environments import MAX_AMOUNT, MAX_ID

__all__ = ["FALSE_VALUES", "TRUE_VALUES", "openapi_document"]

# What a boolean query parameter takes, as Poseidon (Go's strconv.ParseBool) reads it.
TRUE_VALUES: Final = ("1", "t", "T", "TRUE", "true", "True")
FALSE_VALUES: Final = ("0", "f", "F", "FALSE", "false", "False")

PREFIX: Final = "/api/v1"
_JSON: Final = "application/json"
_TOKEN: Final[list[dict[str, list[str]]]] = [{"poseidonAuthToken": []}]
_ENVIRONMENT_FIELDS: Final = (
    "image",
    "prewarmingPoolSize",
    "cpuLimit",
    "memoryLimit",
    "networkAccess",
    "exposedPorts",
)
_ERROR_CODES: Final = [
    "NOMAD_UNREACHABLE",
    "NOMAD_OVERLOAD",
    "NOMAD_INTERNAL_SERVER_ERROR",
    "PREWARMING_POOL_DEPLETING",
    "UNKNOWN",
]


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {_JSON: {"schema": schema}}


def _responses(success: dict[str, Any], *errors: str) -> dict[str, Any]:
    """``success`` plus the named shared responses, each under its status code."""
    codes = {
        "BadRequest": "400",
        "Unauthorized": "401",
        "NotFound": "404",
        "RunnerGone": "410",
        "TooLarge": "413",
        "FailedFileDependency": "424",
        "InternalServerError": "500",
    }
    return {**success, **{codes[name]: _ref("responses", name) for name in errors}}


def _integer(minimum: int, maximum: int, **extra: Any) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, **extra}


def _schemas() -> dict[str, Any]:
    environment = {
        "type": "object",
        "properties": {
            "id": _integer(0, MAX_ID, description="The ID of the execution environment"),
            "image": {"type": "string", "minLength": 1, "pattern": r"\S", "description": "The OCI image"},
            "prewarmingPoolSize": _integer(0, 10_000, description="Idle runners to keep"),
            "cpuLimit": {
                "type": "number",
                "minimum": 0,
                "exclusiveMinimum": True,
                "maximum": MAX_AMOUNT,
                "description": "CPU of one runner in MHz",
            },
            "memoryLimit": _integer(1, MAX_AMOUNT, description="Memory of one runner in MB"),
            "networkAccess": {"type": "boolean"},
            "exposedPorts": {"type": "array", "items": _integer(1, 65535)},
        },
        "required": ["id", *_ENVIRONMENT_FIELDS],
        "additionalProperties": False,
    }
    file_header = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The path, from the workspace, with ./"},
            "entryType": {"type": "string", "enum": ["-", "b", "c", "d", "l", "p", "s", "?"]},
            "linkTarget": {"type": "string", "description": "A link's target, as the link says it"},
            "size": {"type": "integer", "minimum": 0},
            "modificationTime": {"type": "integer"},
            "permissions": {"type": "string", "example": "rwxr--r--"},
            "owner": {"type": "string"},
            "group": {"type": "string"},
        },
        "required": ["name", "entryType", "size", "modificationTime", "permissions", "owner", "group"],
        "additionalProperties": False,
    }
    return {
        "ExecutionEnvironment": environment,
        # A PUT may leave out the id: the path gives it (and a different one is a 400).
        "ExecutionEnvironmentBody": {**environment, "required": list(_ENVIRONMENT_FIELDS)},
        "FileHeader": file_header,
        "ClientError": {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
            "additionalProperties": False,
        },
        "ServerError": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "errorCode": {"type": "string", "enum": _ERROR_CODES},
            },
            "required": ["message", "errorCode"],
            "additionalProperties": False,
        },
    }


def _shared_responses(settings: ServerSettings) -> dict[str, Any]:
    client_error = _json(_ref("schemas", "ClientError"))
    return {
        "BadRequest": {
            "description": "The request is invalid; the message says which field and why",
            "content": client_error,
        },
        "Unauthorized": {"description": "Poseidon-Token is missing or wrong"},
        "NotFound": {"description": "No entity has this ID, or no route matches", "content": client_error},
        "RunnerGone": {"description": "The runner is gone: take another", "content": client_error},
        "TooLarge": {
            "description": f"The request body is larger than server.max_body ({settings.max_body} bytes)",
            "content": client_error,
        },
        "FailedFileDependency": {
            "description": "The file does not exist, cannot be read, or a link leads it out of the workspace",
            "content": client_error,
        },
        "InternalServerError": {
            "description": "The request could not be served now (Nomad unreachable: with Retry-After)",
            "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 0}}},
            "content": _json(_ref("schemas", "ServerError")),
        },
    }


# What every operation on a runner may answer besides its own: a bad request, no token, no route,
# and a runner that is gone.
_RUNNER_ERRORS: Final = ("BadRequest", "Unauthorized", "NotFound", "RunnerGone")


def _runner_id() -> dict[str, Any]:
    schema = {"type": "string", "pattern": "^[^/]+$"}
    return {"name": "runnerId", "in": "path", "required": True, "schema": schema}


def _boolean_query(name: str, default: bool) -> dict[str, Any]:
    """A boolean read as Poseidon reads it (Go's strconv.ParseBool); empty is the default."""
    values = [*TRUE_VALUES, *FALSE_VALUES, ""]
    schema = {"type": "string", "enum": values, "default": str(default).lower()}
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _runner_paths() -> dict[str, Any]:
    runner_links = {
        name: {"operationId": operation, "parameters": {"runnerId": "$response.body#/runnerId"}}
        for name, operation in (
            ("ListFiles", "listFiles"),
            ("UpdateFiles", "updateFiles"),
            ("DownloadFile", "downloadFile"),
            ("Execute", "execute"),
            ("DestroyRunner", "destroyRunner"),
        )
    }
    provided = {
        "type": "object",
        "properties": {
            "runnerId": {"type": "string"},
            "mappedPorts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"exposedPort": _integer(0, 65535), "hostAddress": {"type": "string"}},
                },
            },
        },
        "required": ["runnerId"],
    }
    claim = {
        "type": "object",
        "properties": {
            "inactivityTimeout": _integer(0, MAX_AMOUNT, default=0),
            "executionEnvironmentId": _integer(0, MAX_ID),
        },
        "required": ["executionEnvironmentId"],
        "additionalProperties": False,
    }
    path_string = {"type": "string", "description": "From the workspace, or absolute inside it"}
    patch = {
        "type": "object",
        "properties": {
            "delete": {"type": "array", "nullable": True, "items": path_string},
            "copy": {
                "type": "array",
                "nullable": True,
                "items": {
                    "type": "object",
                    "properties": {"path": path_string, "content": {"type": "string", "format": "byte"}},
                    "required": ["path"],
                    "additionalProperties": False,
                },
            },
        },
        "additionalProperties": False,
    }
    execution = {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_COMMAND_BYTES,
                "pattern": "^[^']*$",
            },
            "privilegedExecution": {"type": "boolean", "default": False},
            "environment": {
                "type": "object",
                "nullable": True,
                "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                "additionalProperties": {"type": "string"},
            },
            "timeLimit": _integer(0, MAX_AMOUNT, default=0),
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    return {
        f"{PREFIX}/runners": {
            "post": {
                "operationId": "provideRunner",
                "summary": "Claim an idle runner of an environment",
                "tags": ["runner"],
                "security": _TOKEN,
                "requestBody": {"required": True, "content": _json(claim)},
                "responses": _responses(
                    {"200": {"description": "The runner", "content": _json(provided), "links": runner_links}},
                    "BadRequest",
                    "Unauthorized",
                    "NotFound",
                    "TooLarge",
                    "InternalServerError",
                ),
            }
        },
        f"{PREFIX}/runners/{{runnerId}}": {
            "delete": {
                "operationId": "destroyRunner",
                "summary": "Give the runner back; it is destroyed",
                "tags": ["runner"],
                "security": _TOKEN,
                "parameters": [_runner_id()],
                "responses": _responses(
                    {"204": {"description": "Given back"}}, "Unauthorized", "NotFound", "RunnerGone"
                ),
            }
        },
        f"{PREFIX}/runners/{{runnerId}}/files": {
            "parameters": [_runner_id()],
            "get": {
                "operationId": "listFiles",
                "summary": "List the workspace, or a path in it",
                "tags": ["runner"],
                "security": _TOKEN,
                "parameters": [
                    _boolean_query("recursive", True),
                    {
                        "name": "path",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "default": "./"},
                    },
                    _boolean_query("privilegedExecution", False),
                ],
                "responses": _responses(
                    {
                        "200": {
                            "description": "The entries",
                            "content": _json(
                                {
                                    "type": "object",
                                    "properties": {
                                        "files": {"type": "array", "items": _ref("schemas", "FileHeader")}
                                    },
                                    "required": ["files"],
                                }
                            ),
                        }
                    },
                    *_RUNNER_ERRORS,
                    "FailedFileDependency",
                    "InternalServerError",
                ),
            },
            "patch": {
                "operationId": "updateFiles",
                "summary": "Delete, then copy, files in the workspace",
                "tags": ["runner"],
                "security": _TOKEN,
                "requestBody": {"required": True, "content": _json(patch)},
                "responses": _responses(
                    {"204": {"description": "Done"}},
                    *_RUNNER_ERRORS,
                    "TooLarge",
                    "InternalServerError",
                ),
            },
        },
        f"{PREFIX}/runners/{{runnerId}}/files/raw": {
            "get": {
                "operationId": "downloadFile",
                "summary": "Download a file, streamed",
                "tags": ["runner"],
                "security": _TOKEN,
                "parameters": [
                    _runner_id(),
                    {"name": "path", "in": "query", "required": True, "schema": {"type": "string"}},
                    _boolean_query("privilegedExecution", False),
                ],
                "responses": _responses(
                    {
                        "200": {
                            "description": "The file",
                            "content": {
                                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                            },
                        }
                    },
                    *_RUNNER_ERRORS,
                    "FailedFileDependency",
                    "InternalServerError",
                ),
            }
        },
        f"{PREFIX}/runners/{{runnerId}}/execute": {
            "post": {
                "operationId": "execute",
                "summary": "Prepare an execution; its WebSocket URL is single-use and bound to the runner",
                "tags": ["runner"],
                "security": _TOKEN,
                "parameters": [_runner_id()],
                "requestBody": {"required": True, "content": _json(execution)},
                "responses": _responses(
                    {
                        "200": {
                            "description": "The WebSocket URL to connect to",
                            "content": _json(
                                {
                                    "type": "object",
                                    "properties": {"websocketUrl": {"type": "string"}},
                                    "required": ["websocketUrl"],
                                }
                            ),
                        }
                    },
                    *_RUNNER_ERRORS,
                    "TooLarge",
                    "InternalServerError",
                ),
            }
        },
        f"{PREFIX}/runners/{{runnerId}}/websocket": {
            "get": {
                "operationId": "connectExecution",
                "summary": "The execution's WebSocket (websocket.schema.json); messages over "
                "server.max_message close it with 1009",
                "tags": ["runner"],
                "security": _TOKEN,
                "parameters": [
                    _runner_id(),
                    {"name": "executionID", "in": "query", "required": True, "schema": {"type": "string"}},
                ],
                "responses": _responses(
                    {
                        "101": {"description": "Switching protocols"},
                        "426": {
                            "description": "A request without a WebSocket upgrade",
                            "content": _json(_ref("schemas", "ClientError")),
                        },
                    },
                    "Unauthorized",
                    "NotFound",
                    "RunnerGone",
                    "InternalServerError",
                ),
            }
        },
    }


def _environment_paths() -> dict[str, Any]:
    fetch = _boolean_query("fetch", False)
    environment_id = {
        "name": "executionEnvironmentId",
        "in": "path",
        "required": True,
        "schema": _integer(0, MAX_ID),
    }
    same_id = {"executionEnvironmentId": "$request.path.executionEnvironmentId"}
    links = {
        "GetEnvironment": {"operationId": "getEnvironment", "parameters": same_id},
        "DeleteEnvironment": {"operationId": "deleteEnvironment", "parameters": same_id},
        "ProvideRunner": {
            "operationId": "provideRunner",
            "requestBody": {"executionEnvironmentId": "$request.path.executionEnvironmentId"},
        },
    }
    environment = _ref("schemas", "ExecutionEnvironment")
    return {
        f"{PREFIX}/execution-environments": {
            "get": {
                "operationId": "listEnvironments",
                "tags": ["execution environment"],
                "security": _TOKEN,
                "parameters": [fetch],
                "responses": _responses(
                    {
                        "200": {
                            "description": "Every environment",
                            "content": _json(
                                {
                                    "type": "object",
                                    "properties": {
                                        "executionEnvironments": {"type": "array", "items": environment}
                                    },
                                    "required": ["executionEnvironments"],
                                }
                            ),
                        }
                    },
                    "BadRequest",
                    "Unauthorized",
                    "InternalServerError",
                ),
            }
        },
        f"{PREFIX}/execution-environments/{{executionEnvironmentId}}": {
            "parameters": [environment_id],
            "get": {
                "operationId": "getEnvironment",
                "tags": ["execution environment"],
                "security": _TOKEN,
                "parameters": [fetch],
                "responses": _responses(
                    {"200": {"description": "The environment", "content": _json(environment)}},
                    "BadRequest",
                    "Unauthorized",
                    "NotFound",
                    "InternalServerError",
                ),
            },
            "put": {
                "operationId": "putEnvironment",
                "tags": ["execution environment"],
                "security": _TOKEN,
                "requestBody": {
                    "required": True,
                    "content": _json(_ref("schemas", "ExecutionEnvironmentBody")),
                },
                "responses": _responses(
                    {
                        "201": {"description": "Created", "links": links},
                        "204": {"description": "Replaced", "links": links},
                    },
                    "BadRequest",
                    "Unauthorized",
                    "TooLarge",
                    "InternalServerError",
                ),
            },
            "delete": {
                "operationId": "deleteEnvironment",
                "tags": ["execution environment"],
                "security": _TOKEN,
                "responses": _responses(
                    {"204": {"description": "Deleted"}},
                    "BadRequest",
                    "Unauthorized",
                    "NotFound",
                    "InternalServerError",
                ),
            },
        },
    }


def _miscellaneous_paths() -> dict[str, Any]:
    health_error = {
        "description": "Nomad is unreachable, or a prewarming pool is depleting",
        "content": _json(_ref("schemas", "ServerError")),
    }
    statistics = {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "prewarmingPoolSize": {"type": "integer"},
                "idleRunners": {"type": "integer"},
                "usedRunners": {"type": "integer"},
            },
            "required": ["id", "prewarmingPoolSize", "idleRunners", "usedRunners"],
        },
    }
    return {
        f"{PREFIX}/health": {
            "get": {
                "operationId": "health",
                "tags": ["miscellaneous"],
                "responses": {"204": {"description": "Everything is okay"}, "503": health_error},
            }
        },
        f"{PREFIX}/health/details": {
            "get": {
                "operationId": "healthDetails",
                "summary": "Every check the health probe reads, with its figures",
                "tags": ["miscellaneous"],
                "security": _TOKEN,
                "responses": _responses(
                    {"200": {"description": "The checks", "content": _json({"type": "object"})}},
                    "Unauthorized",
                ),
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics",
                "tags": ["miscellaneous"],
                "responses": {
                    "200": {
                        "description": "The metrics",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        f"{PREFIX}/version": {
            "get": {
                "operationId": "version",
                "tags": ["miscellaneous"],
                "responses": {
                    "200": {"description": "The release", "content": _json({"type": "string"})},
                    "404": {"description": "No version is set"},
                },
            }
        },
        f"{PREFIX}/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "tags": ["miscellaneous"],
                "responses": {"200": {"description": "The document", "content": _json({"type": "object"})}},
            }
        },
        f"{PREFIX}/statistics/execution-environments": {
            "get": {
                "operationId": "statistics",
                "tags": ["miscellaneous"],
                "security": _TOKEN,
                "responses": _responses(
                    {"200": {"description": "Each environment's runners", "content": _json(statistics)}},
                    "Unauthorized",
                ),
            }
        },
    }


def openapi_document(settings: ServerSettings, version: str) -> dict[str, Any]:
    """The document for a daemon with these server settings."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Runner supervisor API (Poseidon's API, kept)",
            "version": version or "0",
            "description": "Poseidon's API for CodeOcean, as this daemon serves it, with its extensions.",
        },
        "servers": [{"url": "/"}],
        "tags": [{"name": "runner"}, {"name": "execution environment"}, {"name": "miscellaneous"}],
        "components": {
            "schemas": _schemas(),
            "responses": _shared_responses(settings),
            "securitySchemes": {
                "poseidonAuthToken": {"type": "apiKey", "in": "header", "name": "Poseidon-Token"}
            },
        },
        "paths": {**_miscellaneous_paths(), **_runner_paths(), **_environment_paths()},
    }
