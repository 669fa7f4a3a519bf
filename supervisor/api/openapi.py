"""The OpenAPI document of our API (served at ``/api/v1/openapi.json``), written from the app's routes.

Each route's path and methods come from the app, its operation's prose, parameters and answers from
``operations.OPERATIONS`` (under the route's name), and every schema from the declarations that read
the bodies (``request_bodies.py``, ``response_bodies.py``). What is left here is the prose shared by
all: the shared error answers and the document's own. Links let a stateful client follow a runner
or an environment from the call that made it: an answer that gives an ID links to every operation
that takes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

import attrs
from starlette.routing import BaseRoute, Route, WebSocketRoute

from ..core.config import ServerSettings
from .body_fields import json_names, object_schema
from .operations import OPERATIONS, PATH_PARAMETERS, Answer, Link, Operation
from .request_bodies import EnvironmentBody
from .response_bodies import CLIENT_ERROR, SERVER_ERROR, ClientError, FileHeader, ServerError

__all__ = ["RoutedOperation", "openapi_document", "routed_operations"]

_JSON: Final = "application/json"
_TOKEN: Final[tuple[dict[str, list[str]], ...]] = ({"poseidonAuthToken": []},)
_PATH_PARAMETER: Final = re.compile(r"{(\w+)}")
# The shared answers, by status.
_SHARED: Final = {
    400: "BadRequest",
    401: "Unauthorized",
    404: "NotFound",
    410: "RunnerGone",
    413: "TooLarge",
    424: "FailedFileDependency",
    500: "InternalServerError",
}
_DESCRIPTION: Final = (
    "Poseidon's API for CodeOcean (its swagger.yaml v0.2.2), as this daemon serves it, with what it "
    "adds: the health details, the metrics, this document, the limits (server.max_body as 413, the "
    "bounds of every number), Retry-After on answers that say Nomad is unreachable, and the file "
    "headers' fields that Poseidon's implementation sends beyond its swagger (permissions, owner, "
    "group, linkTarget). Every refusal of a request is JSON with a message that names the field."
)


@attrs.frozen
class RoutedOperation:
    """One method of one route, and the operation it serves."""

    path: str
    method: str
    name: str
    operation: Operation
    websocket: bool
    route_path: str


def routed_operations(routes: Iterable[BaseRoute]) -> list[RoutedOperation]:
    """Every method of every route, with its operation and its path as the document writes it
    (``{runnerId}`` for the route's ``{runner_id}``); KeyError for a route that has no operation."""
    routed = []
    for route in routes:
        if isinstance(route, WebSocketRoute):
            methods, websocket = ["GET"], True
        elif isinstance(route, Route):
            methods, websocket = sorted(set(route.methods or ()) - {"HEAD"}), False
        else:
            continue
        operation = OPERATIONS[route.name]
        path = _document_path(route.path)
        routed += [
            RoutedOperation(path, method.lower(), route.name, operation, websocket, route.path)
            for method in methods
        ]
    return routed


def _document_path(route_path: str) -> str:
    return _PATH_PARAMETER.sub(lambda found: f"{{{PATH_PARAMETERS[found[1]].name}}}", route_path)


def _path_parameters(path: str) -> list[str]:
    """The names of a document path's parameters."""
    return _PATH_PARAMETER.findall(path)


def openapi_document(routes: Iterable[BaseRoute], settings: ServerSettings, version: str) -> dict[str, Any]:
    """The document of an app with these routes and server settings."""
    routed = routed_operations(routes)
    paths: dict[str, dict[str, Any]] = {}
    for item in routed:
        paths.setdefault(item.path, {})[item.method] = _operation(item, routed)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Runner supervisor API (Poseidon's API, kept)",
            "version": version or "0",
            "description": _DESCRIPTION,
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
        "paths": paths,
    }


def _operation(item: RoutedOperation, routed: list[RoutedOperation]) -> dict[str, Any]:
    operation = item.operation
    document: dict[str, Any] = {
        "operationId": item.name,
        "summary": operation.summary,
        "tags": [operation.tag],
    }
    if operation.description:
        document["description"] = operation.description
    if operation.token:
        document["security"] = list(_TOKEN)
    by_name = {parameter.name: parameter for parameter in PATH_PARAMETERS.values()}
    parameters = [by_name[name].parameter() for name in _path_parameters(item.path)]
    parameters += [query.parameter() for query in operation.query]
    if parameters:
        document["parameters"] = parameters
    errors = set(operation.errors) | ({401} if operation.token else set())
    if operation.body is not None:
        document["requestBody"] = {"required": True, "content": {_JSON: {"schema": operation.body.schema()}}}
        errors |= {400, 413}
    answers = {status: _answer(answer, item, routed) for status, answer in operation.answers.items()}
    shared = {str(status): {"$ref": f"#/components/responses/{_SHARED[status]}"} for status in errors}
    document["responses"] = dict(sorted({**answers, **shared}.items()))
    return document


def _answer(answer: Answer, item: RoutedOperation, routed: list[RoutedOperation]) -> dict[str, Any]:
    document: dict[str, Any] = {"description": answer.description}
    schema = answer.model.schema() if answer.model is not None else answer.schema
    if schema is not None:
        document["content"] = {answer.media_type: {"schema": dict(schema)}}
    if answer.link is not None:
        document["links"] = _links(answer.link, item, routed)
    return document


def _links(link: Link, source: RoutedOperation, routed: list[RoutedOperation]) -> dict[str, Any]:
    """A link to every other HTTP operation that takes ``link.parameter`` in its path or its body."""
    websockets = {item.name for item in routed if item.websocket}
    links = {}
    for target in routed:
        if target.name in websockets or target.name == source.name:
            continue
        name = target.name[0].upper() + target.name[1:]
        if link.parameter in _path_parameters(target.path):
            links[name] = {"operationId": target.name, "parameters": {link.parameter: link.expression}}
        elif target.operation.body is not None and link.parameter in json_names(target.operation.body.cls):
            links[name] = {"operationId": target.name, "requestBody": {link.parameter: link.expression}}
    return links


def _schemas() -> dict[str, Any]:
    body = object_schema(EnvironmentBody)
    return {
        # As the API shows it: with its ID always. A PUT may leave the ID out, the path gives it.
        "ExecutionEnvironment": {**body, "required": ["id", *body["required"]]},
        "ExecutionEnvironmentBody": body,
        "FileHeader": object_schema(FileHeader),
        "ClientError": object_schema(ClientError),
        "ServerError": object_schema(ServerError),
    }


def _shared_responses(settings: ServerSettings) -> dict[str, Any]:
    client_error = {_JSON: {"schema": CLIENT_ERROR.schema()}}
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
            "description": "The request could not be served now: Nomad could not be reached "
            "(NOMAD_UNREACHABLE, with Retry-After), no runner is idle (NOMAD_OVERLOAD), Nomad failed "
            "(NOMAD_INTERNAL_SERVER_ERROR), or the supervisor did (UNKNOWN)",
            "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 0}}},
            "content": {_JSON: {"schema": SERVER_ERROR.schema()}},
        },
    }
