"""Poseidon's HTTP/WebSocket API (``/api/v1``, swagger.yaml and websocket.schema.json), on starlette.

Every refusal a client should recover from uses Poseidon's codes, because the real client acts on
them: a gone runner is 410; no idle runner is 500 ``NOMAD_OVERLOAD``; the event stream down past the
admission wait is 500 ``NOMAD_UNREACHABLE`` with ``Retry-After``. Client errors are ``{"message"}``,
server errors ``{"message", "errorCode"}``.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import posixpath
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import quote

import attrs
import orjson
import trio
from loguru import logger
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from .. import __version__
from ..base.errors import (
    FileNotAvailable,
    InvalidRequest,
    NoIdleRunner,
    NomadUnreachable,
    RequestTooLarge,
    RunnerGoneError,
    SupervisorError,
    UnknownEnvironment,
)
from ..base.levels import StreamState
from ..core.commands import validate_command
from ..core.config import Settings
from ..core.environments import MAX_AMOUNT, MAX_ID, decimal, environment_from_dict
from ..core.runners import Runner
from ..desk.desk import RUNNER_GONE
from ..desk.executions import CLOSE_STALLED, REASON_STALLED, ExecutionRequest
from ..desk.files import Download, parse_patch
from ..desk.service import RunnerService
from ..ops.observability import health_details, metrics_text, pool_statistics
from .http_connection import WEBSOCKET_ENDED
from .openapi import FALSE_VALUES, TRUE_VALUES, openapi_document

__all__ = ["create_app"]

PREFIX: Final = "/api/v1"
_UNAUTHENTICATED: Final = frozenset(
    {f"{PREFIX}/health", f"{PREFIX}/version", f"{PREFIX}/openapi.json", "/metrics"}
)
# Floats this large that are whole numbers were integers past 64 bits in the JSON.
_HUGE: Final = 2.0**63
_CLIENT_GONE: Final = (trio.BusyResourceError, trio.BrokenResourceError, trio.ClosedResourceError)


def client_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status)


def _too_large(message: str) -> JSONResponse:
    """413: the rest of the body is never read, so the connection cannot carry another request;
    ``Connection: close`` tells the client so (else it would send its next one on it)."""
    return JSONResponse({"message": message}, status_code=413, headers={"Connection": "close"})


def server_error(message: str, code: str, *, retry_after: int | None = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"message": message, "errorCode": code}, status_code=500, headers=headers)


def _bool(request: Request, name: str, default: bool) -> bool:
    """A boolean query parameter, read as Poseidon (Go's strconv.ParseBool) reads it; empty is absent."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if raw in TRUE_VALUES:
        return True
    if raw in FALSE_VALUES:
        return False
    raise InvalidRequest(f"query parameter {name} must be true or false, got {raw!r}")


def _has_huge_integer(document: Any) -> bool:
    """Whether orjson turned an integer past 64 bits into a float (and so lost its digits). Walked
    without recursion: orjson takes documents nested 1,024 deep."""
    pending = [document]
    while pending:
        value = pending.pop()
        if isinstance(value, float) and value.is_integer() and abs(value) >= _HUGE:
            return True
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def _json_body(request: Request) -> Any:
    body = await request.body()
    if not body.strip():
        raise InvalidRequest("the request body is empty")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not JSON: {exc}") from None
    if _has_huge_integer(document):
        # The standard parser keeps every digit, so that a 400 shows the number the client sent.
        try:
            return json.loads(body, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise InvalidRequest(f"the request body is not JSON we take: {exc}") from None
    return document


def _fields(body: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0]!r}")
    return body


def _non_negative_int(body: dict[str, Any], name: str, maximum: int = MAX_AMOUNT) -> int:
    value = body.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise InvalidRequest(f"{name} must be an integer from 0 to {maximum}, got {value!r}")
    return value


class _Auth:
    """``Poseidon-Token`` on every route but health and version; a wrong or missing token is a 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.token or scope["type"] not in ("http", "websocket") or scope["path"] in _UNAUTHENTICATED:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or ()).get(b"poseidon-token", b"")
        if hmac.compare_digest(given, self.token):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            websocket = WebSocket(scope, receive, send)
            await websocket.send_denial_response(Response(status_code=401))
            return
        await Response(status_code=401)(scope, receive, send)


def _execution_request(data: Any, runner_id: str) -> ExecutionRequest:
    """The body of ``POST /runners/{id}/execute``, checked."""
    body = _fields(data, {"command", "privilegedExecution", "environment", "timeLimit"})
    command = body.get("command")
    if not isinstance(command, str) or not command.strip():
        raise InvalidRequest("command is required and must be a non-empty string")
    if "'" in command:
        raise InvalidRequest("command must not contain a single quotation mark (')")
    environment = body.get("environment")
    environment = {} if environment is None else environment
    if not isinstance(environment, dict) or not all(isinstance(v, str) for v in environment.values()):
        raise InvalidRequest("environment must be an object of string values")
    privileged = body.get("privilegedExecution", False)
    if not isinstance(privileged, bool):
        raise InvalidRequest("privilegedExecution must be true or false")
    validate_command(command, environment)
    return ExecutionRequest(
        runner_id=runner_id,
        command=command,
        environment=environment,
        time_limit=_non_negative_int(body, "timeLimit"),
        privileged=privileged,
    )


class _BodyLimit:
    """A request body over ``limit`` bytes is a 413: at once when its Content-Length says so, and as
    soon as it passes the limit when it comes chunked. It is never read whole."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            await _too_large(self._message())(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise RequestTooLarge(self._message())
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is larger than the {self.limit} bytes taken (server.max_body)"


class _ClientSocket:
    """The execution's view of the client's WebSocket."""

    def __init__(self, websocket: WebSocket) -> None:
        self._websocket = websocket

    async def send_json(self, message: dict[str, Any]) -> None:
        try:
            await self._websocket.send_text(orjson.dumps(message).decode())
        except (WebSocketDisconnect, RuntimeError, *_CLIENT_GONE) as exc:
            raise trio.BrokenResourceError("the client is gone") from exc

    async def receive_text(self) -> str | None:
        while True:
            try:
                message = await self._websocket.receive()
            except RuntimeError:
                return None
            if message["type"] == "websocket.disconnect":
                return None
            if message.get("text") is not None:
                return str(message["text"])

    async def wait_closed(self) -> None:
        ended = self._websocket.scope.get("extensions", {}).get(WEBSOCKET_ENDED)
        if ended is None:  # another ASGI server: receive_text() alone tells
            await trio.sleep_forever()
        await ended.wait()


class _Routes:
    def __init__(self, service: RunnerService, settings: Settings) -> None:
        # The service only for the reports (health details, metrics); everything else asks the desk.
        self.service = service
        self.desk = service.desk
        self.settings = settings
        self.document = openapi_document(settings.server, settings.server.version or __version__)

    # -- miscellaneous --------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        state = self.desk.stream_state
        if state is not StreamState.UP:
            message = f"the Nomad event stream is {state.value}"
            return JSONResponse({"message": message, "errorCode": "NOMAD_UNREACHABLE"}, status_code=503)
        threshold = self.settings.alert.prewarming_pool_threshold
        depleting = [str(s.environment_id) for s in self.desk.stats().values() if s.is_depleting(threshold)]
        if depleting:
            message = f"the prewarming pool is depleting: environments {', '.join(depleting)}"
            return JSONResponse(
                {"message": message, "errorCode": "PREWARMING_POOL_DEPLETING"}, status_code=503
            )
        return Response(status_code=204)

    async def health_details(self, request: Request) -> Response:
        return JSONResponse(await health_details(self.service, self.settings))

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(metrics_text(self.service), media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.document)

    async def version(self, request: Request) -> Response:
        version = self.settings.server.version or __version__
        return JSONResponse(version) if version else Response(status_code=404)

    async def statistics(self, request: Request) -> Response:
        return JSONResponse({str(k): pool_statistics(v) for k, v in self.desk.stats().items()})

    # -- environments ---------------------------------------------------------------------------

    def _environment_id(self, request: Request) -> int:
        raw = request.path_params["environment_id"]
        value = decimal(raw)
        if value is None or value > MAX_ID:
            raise InvalidRequest(f"executionEnvironmentId must be an integer from 0 to {MAX_ID}, got {raw!r}")
        return value

    async def list_environments(self, request: Request) -> Response:
        if _bool(request, "fetch", False):
            await self.desk.store.load()
        environments = [e.to_api() for e in self.desk.environments()]
        return JSONResponse({"executionEnvironments": environments})

    async def get_environment(self, request: Request) -> Response:
        environment_id = self._environment_id(request)
        fetch = _bool(request, "fetch", False)
        environment = (
            await self.desk.store.fetch(environment_id) if fetch else self.desk.environment(environment_id)
        )
        if environment is None:
            return client_error(404, f"execution environment {environment_id} does not exist")
        return JSONResponse(environment.to_api())

    async def put_environment(self, request: Request) -> Response:
        environment_id = self._environment_id(request)
        environment = environment_from_dict(await _json_body(request), environment_id=environment_id)
        created = await self.desk.store.put(environment)
        return Response(status_code=201 if created else 204)

    async def delete_environment(self, request: Request) -> Response:
        environment_id = self._environment_id(request)
        try:
            await self.desk.store.delete(environment_id)
        except UnknownEnvironment:
            return client_error(404, f"execution environment {environment_id} does not exist")
        return Response(status_code=204)

    # -- runners --------------------------------------------------------------------------------

    async def provide_runner(self, request: Request) -> Response:
        body = _fields(await _json_body(request), {"executionEnvironmentId", "inactivityTimeout"})
        environment_id = body.get("executionEnvironmentId")
        if isinstance(environment_id, bool) or not isinstance(environment_id, int):
            raise InvalidRequest("executionEnvironmentId is required and must be an integer")
        timeout = _non_negative_int(body, "inactivityTimeout")
        try:
            runner = await self.desk.claim(environment_id, timeout)
        except NoIdleRunner:
            return server_error("no runners available", "NOMAD_OVERLOAD")
        except UnknownEnvironment:
            return client_error(404, f"execution environment {environment_id} does not exist")
        return JSONResponse({"runnerId": runner.id, "mappedPorts": runner.mapped_ports()})

    async def _runner(self, request: Request) -> Runner:
        """The request's runner, if it may start something new; a suspect one is proven first."""
        return await self.desk.runner_for_work(request.path_params["runner_id"])

    async def delete_runner(self, request: Request) -> Response:
        try:
            await self.desk.release(request.path_params["runner_id"])
        except RunnerGoneError:
            return client_error(410, RUNNER_GONE)
        return Response(status_code=204)

    async def list_files(self, request: Request) -> Response:
        recursive = _bool(request, "recursive", True)
        privileged = _bool(request, "privilegedExecution", False)
        path = request.query_params.get("path") or "./"
        runner = await self._runner(request)
        files = await self.desk.list_files(runner, path, recursive=recursive, privileged=privileged)
        return JSONResponse({"files": files})

    async def update_files(self, request: Request) -> Response:
        deletions, copies = parse_patch(
            await _json_body(request), self.desk.workspace, max_files=self.settings.server.max_files
        )
        runner = await self._runner(request)
        await self.desk.update_files(runner, deletions, copies)
        return Response(status_code=204)

    async def download_file(self, request: Request) -> Response:
        path = request.query_params.get("path")
        if not path:
            raise InvalidRequest("query parameter path is required")
        privileged = _bool(request, "privilegedExecution", False)
        runner = await self._runner(request)
        # The runner is held until the last byte is sent.
        content, release = await self.desk.download(runner, path, privileged=privileged)
        name = quote(posixpath.basename(path.rstrip("/")) or "file")
        headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{name}"}
        return _DownloadResponse(content, release, media_type="application/octet-stream", headers=headers)

    async def execute(self, request: Request) -> Response:
        execution = _execution_request(await _json_body(request), request.path_params["runner_id"])
        runner = await self._runner(request)
        # A client that holds the execution up as long as this is taken as gone.
        execution = attrs.evolve(execution, inactivity_timeout=runner.inactivity_timeout)
        execution_id = await self.desk.prepare_execution(runner, execution)
        scheme = "wss" if request.url.scheme == "https" else "ws"
        host = request.headers.get("host", f"{self.settings.server.address}:{self.settings.server.port}")
        url = f"{scheme}://{host}{PREFIX}/runners/{runner.id}/websocket?executionID={execution_id}"
        return JSONResponse({"websocketUrl": url})

    async def websocket_without_upgrade(self, request: Request) -> Response:
        response = client_error(426, "this route takes a WebSocket: connect with an Upgrade request")
        response.headers.update({"Upgrade": "websocket", "Connection": "Upgrade"})
        return response

    async def websocket(self, websocket: WebSocket) -> None:
        runner_id = websocket.path_params["runner_id"]
        execution_id = websocket.query_params.get("executionID", "")
        try:
            # Its URL may have been handed out before the stream was lost: the gate is waited at
            # again before the URL is used up, so that the client can try it again after Retry-After.
            request = await self.desk.take_execution(runner_id, execution_id)
        except NomadUnreachable as exc:
            await websocket.send_denial_response(server_error(str(exc), "NOMAD_UNREACHABLE", retry_after=5))
            return
        except LookupError as exc:
            await websocket.send_denial_response(client_error(404, str(exc)))
            return
        except RunnerGoneError:
            await websocket.send_denial_response(client_error(410, RUNNER_GONE))
            return
        await websocket.accept()
        code = await self.desk.execute(_ClientSocket(websocket), execution_id, request)
        # A client that closes as soon as it reads the terminal message races our close frame: then
        # the socket is closing either way.
        with contextlib.suppress(RuntimeError, *_CLIENT_GONE):
            await websocket.close(code=code, reason=REASON_STALLED if code == CLOSE_STALLED else None)


class _DownloadResponse(StreamingResponse):
    """Closes its download when the response ends: starlette abandons the body iterator of a
    client that disconnects, which would leave the reading task waiting to hand over its next chunk."""

    def __init__(self, download: Download, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(download, **kwargs)
        self._download = download
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._download.close()
            self._release()


def _error_response(status: int, code: str = "") -> Any:
    async def handle(request: Request, exc: Exception) -> Response:
        if status == 500:
            logger.warning("{} {} failed: {}", request.method, request.url.path, exc)
            return server_error(str(exc), code, retry_after=5 if code == "NOMAD_UNREACHABLE" else None)
        message = str(exc)
        if status == 413:
            return _too_large(message)
        if isinstance(exc, RunnerGoneError) and message != RUNNER_GONE:
            message = f"{RUNNER_GONE}: {message}"
        return client_error(status, message)

    return handle


async def _routing_error(request: Request, exc: Exception) -> Response:
    """No route (404) or no such method on it (405), as JSON like every other error."""
    assert isinstance(exc, HTTPException)
    response = client_error(exc.status_code, exc.detail)
    response.headers.update(exc.headers or {})
    return response


def create_app(service: RunnerService, settings: Settings) -> ASGIApp:
    """Poseidon's API over ``service``, behind the Poseidon-Token check when a token is set."""
    routes = _Routes(service, settings)
    runner = f"{PREFIX}/runners/{{runner_id}}"
    environment = f"{PREFIX}/execution-environments/{{environment_id}}"
    app = Starlette(
        routes=[
            Route(f"{PREFIX}/health", routes.health, methods=["GET"]),
            Route(f"{PREFIX}/health/details", routes.health_details, methods=["GET"]),
            Route("/metrics", routes.metrics, methods=["GET"]),
            Route(f"{PREFIX}/version", routes.version, methods=["GET"]),
            Route(f"{PREFIX}/openapi.json", routes.openapi, methods=["GET"]),
            Route(f"{PREFIX}/statistics/execution-environments", routes.statistics, methods=["GET"]),
            Route(f"{PREFIX}/runners", routes.provide_runner, methods=["POST"]),
            Route(runner, routes.delete_runner, methods=["DELETE"]),
            Route(f"{runner}/files", routes.list_files, methods=["GET"]),
            Route(f"{runner}/files", routes.update_files, methods=["PATCH"]),
            Route(f"{runner}/files/raw", routes.download_file, methods=["GET"]),
            Route(f"{runner}/execute", routes.execute, methods=["POST"]),
            WebSocketRoute(f"{runner}/websocket", routes.websocket),
            Route(f"{runner}/websocket", routes.websocket_without_upgrade, methods=["GET"]),
            Route(f"{PREFIX}/execution-environments", routes.list_environments, methods=["GET"]),
            Route(environment, routes.get_environment, methods=["GET"]),
            Route(environment, routes.put_environment, methods=["PUT"]),
            Route(environment, routes.delete_environment, methods=["DELETE"]),
        ],
        exception_handlers={
            HTTPException: _routing_error,
            RunnerGoneError: _error_response(410),
            RequestTooLarge: _error_response(413),
            InvalidRequest: _error_response(400),
            FileNotAvailable: _error_response(424),
            NomadUnreachable: _error_response(500, "NOMAD_UNREACHABLE"),
            SupervisorError: _error_response(500, "NOMAD_INTERNAL_SERVER_ERROR"),
        },
    )
    return _Auth(_BodyLimit(app, settings.server.max_body), settings.server.token)
