"""Poseidon's HTTP/WebSocket API (``/api/v1``, swagger.yaml and websocket.schema.json), on starlette.

Every refusal a client should recover from uses Poseidon's codes, because the real client acts on
them: a gone runner is 410; no idle runner is 500 ``NOMAD_OVERLOAD``; the event stream down past the
admission wait, or Nomad not reached after the client's retries, is 500 ``NOMAD_UNREACHABLE`` with
``Retry-After``; Nomad's own failure (a 500 of its own) is ``NOMAD_INTERNAL_SERVER_ERROR``. Client
errors are ``{"message"}``, server errors ``{"message", "errorCode"}``, a bug's too (``UNKNOWN``).
Every body is read by ``request_bodies.read_body`` and every parameter through its declaration in
``operations.py``, so that bad input is a 400 naming the field before anything reaches a runner.
"""

from __future__ import annotations

import contextlib
import hmac
import posixpath
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Final
from urllib.parse import quote

import orjson
import trio
from loguru import logger
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from .. import __version__
from ..base.errors import (
    FileNotAvailable,
    InvalidRequest,
    NoIdleRunner,
    NomadUnavailableError,
    NomadUnreachable,
    RequestTooLarge,
    RunnerGoneError,
    SupervisorError,
    UnknownEnvironment,
)
from ..base.levels import StreamState
from ..core.config import Settings
from ..core.environments import runner_environment_id
from ..core.runners import Runner
from ..desk.desk import RUNNER_GONE
from ..desk.executions import CLOSE_STALLED, REASON_STALLED, ExecutionRequest
from ..desk.files import Download, resolve_patch
from ..desk.service import RunnerService
from ..ops.metrics import DaemonMetrics
from ..ops.observability import health_details, pool_statistics
from ..ops.tracing import TracedRoute, run_span, tag_environment, tracing_enabled
from .forwarded import is_secure, trusted_proxies
from .http_connection import WEBSOCKET_ENDED
from .http_metrics import CountRequests, serve_metrics
from .openapi import openapi_document, routed_operations
from .operations import (
    DOWNLOAD_PATH,
    ENVIRONMENT_ID,
    EXECUTION_ID,
    FETCH,
    LISTING_PATH,
    PRIVILEGED,
    RECURSIVE,
    RUNNER_ID,
)
from .request_bodies import ENVIRONMENT, EXECUTION, FILE_PATCH, RUNNER_CLAIM, read_body
from .standby import READY_PATH, unready

__all__ = ["create_app"]

PREFIX: Final = "/api/v1"
_CLIENT_GONE: Final = (trio.BusyResourceError, trio.BrokenResourceError, trio.ClosedResourceError)
_UNREACHABLE: Final = "NOMAD_UNREACHABLE"
# A binary message on an execution's WebSocket: refused as data of a type not taken (RFC 6455 1003).
CLOSE_BINARY: Final = 1003
REASON_BINARY: Final = "binary messages are not taken: send stdin as text"
_RETRY_AFTER: Final = 5  # seconds, on NOMAD_UNREACHABLE
_NO_LEADER: Final = "No cluster leader"


def client_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status)


def _too_large(message: str) -> JSONResponse:
    """413: the rest of the body is never read, so the connection cannot carry another request;
    ``Connection: close`` tells the client so (else it would send its next one on it)."""
    return JSONResponse({"message": message}, status_code=413, headers={"Connection": "close"})


def server_error(message: str, code: str, *, retry_after: int | None = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"message": message, "errorCode": code}, status_code=500, headers=headers)


class _Auth:
    """``Poseidon-Token`` on every route but those at ``open_paths`` (health, version...); a wrong or
    missing token is a 401."""

    def __init__(self, app: ASGIApp, token: str, open_paths: Collection[str]) -> None:
        self.app = app
        self.token = token.encode()
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.token or scope["type"] not in ("http", "websocket") or scope["path"] in self.open_paths:
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
            if message.get("bytes") is not None:
                # Poseidon takes text only, and reads no more of a client that sends bytes: this
                # says so to the client, and its execution ends as when it closes.
                with contextlib.suppress(RuntimeError, *_CLIENT_GONE):
                    await self._websocket.close(code=CLOSE_BINARY, reason=REASON_BINARY)
                return None

    async def wait_closed(self) -> None:
        ended = self._websocket.scope.get("extensions", {}).get(WEBSOCKET_ENDED)
        if ended is None:  # another ASGI server: receive_text() alone tells
            await trio.sleep_forever()
        await ended.wait()


class _Routes:
    def __init__(self, service: RunnerService, settings: Settings, metrics: DaemonMetrics) -> None:
        # The service only for the health details and readiness; everything else asks the desk, and
        # an execution the desk admitted runs in the execution service.
        self.service = service
        self.desk = service.desk
        self.executions = service.executions
        self.settings = settings
        self.metrics = metrics
        # Written from the app's routes once they are made (create_app).
        self.document: dict[str, Any] = {}

    # -- miscellaneous --------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        state = self.desk.stream_state
        if state is not StreamState.UP:
            message = f"the Nomad event stream is {state.value}"
            return JSONResponse({"message": message, "errorCode": _UNREACHABLE}, status_code=503)
        threshold = self.settings.alert.prewarming_pool_threshold
        depleting = [str(s.environment_id) for s in self.desk.stats().values() if s.is_depleting(threshold)]
        if depleting:
            message = f"the prewarming pool is depleting: environments {', '.join(depleting)}"
            return JSONResponse(
                {"message": message, "errorCode": "PREWARMING_POOL_DEPLETING"}, status_code=503
            )
        return Response(status_code=204)

    async def health_ready(self, request: Request) -> Response:
        """For a load balancer: 204 while this daemon serves claims, whatever its pools and faults."""
        why = unready(synced=self.service.informer.is_synced(), stopping=self.executions.stopping)
        if why is None:
            return Response(status_code=204)
        code, message = why
        return JSONResponse({"message": message, "errorCode": code}, status_code=503)

    async def health_details(self, request: Request) -> Response:
        details = await health_details(self.service, self.settings, simulated=self.metrics.simulated())
        return JSONResponse(details)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.document)

    async def version(self, request: Request) -> Response:
        version = self.settings.server.version or __version__
        return JSONResponse(version) if version else Response(status_code=404)

    async def statistics(self, request: Request) -> Response:
        return JSONResponse({str(k): pool_statistics(v) for k, v in self.desk.stats().items()})

    # -- environments ---------------------------------------------------------------------------

    async def list_environments(self, request: Request) -> Response:
        if FETCH.read(request.query_params):
            await self.desk.store.load()
        environments = [e.to_api() for e in await self.desk.listed_environments()]
        return JSONResponse({"executionEnvironments": environments})

    async def get_environment(self, request: Request) -> Response:
        environment_id = ENVIRONMENT_ID.read(request.path_params)
        fetch = FETCH.read(request.query_params)
        environment = (
            await self.desk.store.fetch(environment_id)
            if fetch
            else await self.desk.listed_environment(environment_id)
        )
        if environment is None:
            return client_error(404, f"execution environment {environment_id} does not exist")
        return JSONResponse(environment.to_api())

    async def put_environment(self, request: Request) -> Response:
        environment_id = ENVIRONMENT_ID.read(request.path_params)
        tag_environment(environment_id)
        body = read_body(await request.body(), ENVIRONMENT)
        created = await self.desk.store.put(body.environment(environment_id))
        return Response(status_code=201 if created else 204)

    async def delete_environment(self, request: Request) -> Response:
        environment_id = ENVIRONMENT_ID.read(request.path_params)
        try:
            await self.desk.store.delete(environment_id)
        except UnknownEnvironment:
            return client_error(404, f"execution environment {environment_id} does not exist")
        return Response(status_code=204)

    # -- runners --------------------------------------------------------------------------------

    async def provide_runner(self, request: Request) -> Response:
        claim = read_body(await request.body(), RUNNER_CLAIM)
        environment_id = claim.execution_environment_id
        tag_environment(environment_id)
        try:
            runner = await self.desk.claim(environment_id, claim.inactivity_timeout)
        except NoIdleRunner:
            return server_error("no runners available", "NOMAD_OVERLOAD")
        except UnknownEnvironment:
            return client_error(404, f"execution environment {environment_id} does not exist")
        return JSONResponse({"runnerId": runner.id, "mappedPorts": runner.mapped_ports()})

    async def _runner(self, request: Request) -> Runner:
        """The request's runner, if it may start something new; a suspect one is proven first."""
        runner = await self.desk.runner_for_work(RUNNER_ID.read(request.path_params))
        tag_environment(runner.environment_id)
        return runner

    async def delete_runner(self, request: Request) -> Response:
        try:
            await self.desk.release(RUNNER_ID.read(request.path_params))
        except RunnerGoneError:
            return client_error(410, RUNNER_GONE)
        return Response(status_code=204)

    async def list_files(self, request: Request) -> Response:
        recursive = RECURSIVE.read(request.query_params)
        privileged = PRIVILEGED.read(request.query_params)
        path = LISTING_PATH.read(request.query_params)
        runner = await self._runner(request)
        files = await self.desk.list_files(runner, path, recursive=recursive, privileged=privileged)
        return JSONResponse({"files": files})

    async def update_files(self, request: Request) -> Response:
        patch = read_body(await request.body(), FILE_PATCH)
        deletions, copies = resolve_patch(
            patch.delete,
            [(entry.path, entry.content) for entry in patch.copy],
            self.desk.workspace,
            max_files=self.settings.server.max_files,
        )
        runner = await self._runner(request)
        await self.desk.update_files(runner, deletions, copies)
        return Response(status_code=204)

    async def download_file(self, request: Request) -> Response:
        path = DOWNLOAD_PATH.read(request.query_params)
        privileged = PRIVILEGED.read(request.query_params)
        runner = await self._runner(request)
        # The runner is held until the last byte is sent.
        content, release = await self.desk.download(runner, path, privileged=privileged)
        name = quote(posixpath.basename(path.rstrip("/")) or "file")
        headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{name}"}
        if content.size is not None:
            headers["Content-Length"] = str(content.size)
        return _DownloadResponse(
            content, release, path, media_type="application/octet-stream", headers=headers
        )

    async def execute(self, request: Request) -> Response:
        body = read_body(await request.body(), EXECUTION)
        runner = await self._runner(request)
        execution = ExecutionRequest(
            runner_id=runner.id,
            command=body.command,
            environment=dict(body.environment),
            time_limit=body.time_limit,
            privileged=body.privileged_execution,
            # A client that holds the execution up as long as this is taken as gone.
            inactivity_timeout=runner.inactivity_timeout,
        )
        execution_id = await self.desk.prepare_execution(runner, execution)
        trusted = trusted_proxies(self.settings.server.forwarded_allow_ips)
        scheme = "wss" if is_secure(request.scope, trusted) else "ws"
        host = request.headers.get("host", f"{self.settings.server.address}:{self.settings.server.port}")
        url = f"{scheme}://{host}{PREFIX}/runners/{runner.id}/websocket?executionID={execution_id}"
        return JSONResponse({"websocketUrl": url})

    async def websocket_without_upgrade(self, request: Request) -> Response:
        response = client_error(426, "this route takes a WebSocket: connect with an Upgrade request")
        response.headers.update({"Upgrade": "websocket", "Connection": "Upgrade"})
        return response

    async def websocket(self, websocket: WebSocket) -> None:
        runner_id = RUNNER_ID.read(websocket.path_params)
        execution_id = websocket.query_params.get(EXECUTION_ID.name, "")
        try:
            # Its URL may have been handed out before the stream was lost: the gate is waited at
            # again before the URL is used up, so that the client can try it again after Retry-After.
            execution = await self.desk.take_execution(runner_id, execution_id)
        except NomadUnreachable as exc:
            await websocket.send_denial_response(
                server_error(str(exc), _UNREACHABLE, retry_after=_RETRY_AFTER)
            )
            return
        except LookupError as exc:
            await websocket.send_denial_response(client_error(404, str(exc)))
            return
        except RunnerGoneError:
            await websocket.send_denial_response(client_error(410, RUNNER_GONE))
            return
        if (environment_id := runner_environment_id(runner_id)) is not None:
            tag_environment(environment_id)
        await websocket.accept()
        with run_span("nomad.execute.tty", "Interactive Execution"):
            code = await self.executions.serve(_ClientSocket(websocket), execution)
        # A client that closes as soon as it reads the terminal message races our close frame: then
        # the socket is closing either way.
        with contextlib.suppress(RuntimeError, *_CLIENT_GONE):
            await websocket.close(code=code, reason=REASON_STALLED if code == CLOSE_STALLED else None)


class _DownloadResponse(StreamingResponse):
    """Closes its download when the response ends: starlette abandons the body iterator of a
    client that disconnects, which would leave the reading task waiting to hand over its next chunk.

    With the file's size known it sends ``Content-Length``, and never claims a length it cannot
    honour: the last byte waits until the file has ended there, so a file that runs short or over
    while it is sent ends the response one byte or more short, and the server closes the
    connection (the client sees a body cut short, never a whole one that is not the file)."""

    def __init__(self, download: Download, release: Callable[[], None], path: str, **kwargs: Any) -> None:
        super().__init__(download, **kwargs)
        self._download = download
        self._release = release
        self._path = path

    async def stream_response(self, send: Send) -> None:
        size = self._download.size
        if size is None:
            await super().stream_response(send)
            return
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        sent, last = 0, b""
        async for chunk in self._download:
            if last or sent + len(chunk) > size:
                logger.warning("{} grew past its size {} while it was sent: cut short", self._path, size)
                return
            sendable = chunk[: max(0, size - 1 - sent)]
            last = chunk[len(sendable) :]
            if sendable:
                await send({"type": "http.response.body", "body": sendable, "more_body": True})
                sent += len(sendable)
        if sent + len(last) != size:
            logger.warning(
                "{} ended at {} of its {} bytes while it was sent: cut short", self._path, sent, size
            )
            return
        await send({"type": "http.response.body", "body": last, "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._download.close()
            self._release()


def _refusal(status: int) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The answer to a request refused with ``status`` (4xx), its message the error's."""

    async def refuse(request: Request, exc: Exception) -> Response:
        message = str(exc)
        if status == 413:
            return _too_large(message)
        if isinstance(exc, RunnerGoneError) and message != RUNNER_GONE:
            message = f"{RUNNER_GONE}: {message}"
        return client_error(status, message)

    return refuse


def error_code(exc: SupervisorError) -> str:
    """What happened, as Poseidon's errorCode says it: Nomad not reached (the event stream down past
    the admission wait, no answer or no leader after the client's retries, a gateway's 5xx) is
    NOMAD_UNREACHABLE; anything else, a 500 of Nomad's own included, NOMAD_INTERNAL_SERVER_ERROR."""
    if isinstance(exc, NomadUnreachable):
        return _UNREACHABLE
    if isinstance(exc, NomadUnavailableError) and not (exc.status_code == 500 and _NO_LEADER not in exc.body):
        return _UNREACHABLE
    return "NOMAD_INTERNAL_SERVER_ERROR"


async def _server_failure(request: Request, exc: Exception) -> Response:
    """A request that could not be served now: 500 with what happened."""
    assert isinstance(exc, SupervisorError)
    logger.warning("{} {} failed: {}", request.method, request.url.path, exc)
    code = error_code(exc)
    return server_error(str(exc), code, retry_after=_RETRY_AFTER if code == _UNREACHABLE else None)


async def _bug(request: Request, exc: Exception) -> Response:
    """A bug's 500, as JSON like every other answer (starlette raises the error on, to be logged)."""
    return server_error("the request failed on an error of the supervisor's; it is logged", "UNKNOWN")


async def _routing_error(request: Request, exc: Exception) -> Response:
    """No route (404) or no such method on it (405), as JSON like every other error."""
    assert isinstance(exc, HTTPException)
    response = client_error(exc.status_code, exc.detail)
    response.headers.update(exc.headers or {})
    return response


def create_app(service: RunnerService, settings: Settings, metrics: DaemonMetrics | None = None) -> ASGIApp:
    """Poseidon's API over ``service``, behind the Poseidon-Token check when a token is set; its
    requests counted into ``metrics`` (the daemon's, which outlive the app; else its own)."""
    metrics = DaemonMetrics(lambda: service) if metrics is None else metrics
    routes = _Routes(service, settings, metrics)
    runner = f"{PREFIX}/runners/{{runner_id}}"
    environment = f"{PREFIX}/execution-environments/{{environment_id}}"

    def traced(path: str, op: str, description: str) -> list[Middleware] | None:
        """The route as a Sentry transaction with Poseidon's span, when tracing is on."""
        if not tracing_enabled():
            return None
        return [Middleware(TracedRoute, path=path, op=op, description=description)]

    def traced_route(path: str, endpoint: Any, method: str, name: str, op: str, description: str) -> Route:
        """A route Sentry traces under Poseidon's span ``op`` when tracing is on."""
        return Route(path, endpoint, methods=[method], name=name, middleware=traced(path, op, description))

    app = Starlette(
        routes=[
            Route(f"{PREFIX}/health", routes.health, methods=["GET"], name="health"),
            Route(f"{PREFIX}/health/details", routes.health_details, methods=["GET"], name="healthDetails"),
            Route(READY_PATH, routes.health_ready, methods=["GET"], name="healthReady"),
            Route("/metrics", serve_metrics(metrics), methods=["GET"], name="metrics"),
            Route(f"{PREFIX}/version", routes.version, methods=["GET"], name="version"),
            Route(f"{PREFIX}/openapi.json", routes.openapi, methods=["GET"], name="openapi"),
            Route(
                f"{PREFIX}/statistics/execution-environments",
                routes.statistics,
                methods=["GET"],
                name="statistics",
            ),
            traced_route(
                f"{PREFIX}/runners",
                routes.provide_runner,
                "POST",
                "provideRunner",
                "api.runner.claim",
                "Claim Runner",
            ),
            traced_route(
                runner, routes.delete_runner, "DELETE", "destroyRunner", "api.runner.delete", "Return Runner"
            ),
            traced_route(
                f"{runner}/files", routes.list_files, "GET", "listFiles", "api.fs.list", "List File System"
            ),
            traced_route(
                f"{runner}/files",
                routes.update_files,
                "PATCH",
                "updateFiles",
                "api.fs.update",
                "Update File System",
            ),
            traced_route(
                f"{runner}/files/raw",
                routes.download_file,
                "GET",
                "downloadFile",
                "api.fs.read",
                "File Content",
            ),
            traced_route(
                f"{runner}/execute", routes.execute, "POST", "execute", "api.runner.exec", "Store Execution"
            ),
            WebSocketRoute(
                f"{runner}/websocket",
                routes.websocket,
                name="connectExecution",
                middleware=traced(f"{runner}/websocket", "api.runner.connect", "Execute Interactively"),
            ),
            Route(
                f"{runner}/websocket",
                routes.websocket_without_upgrade,
                methods=["GET"],
                name="connectExecution",
            ),
            Route(
                f"{PREFIX}/execution-environments",
                routes.list_environments,
                methods=["GET"],
                name="listEnvironments",
            ),
            Route(environment, routes.get_environment, methods=["GET"], name="getEnvironment"),
            traced_route(
                environment,
                routes.put_environment,
                "PUT",
                "putEnvironment",
                "api.env.update",
                "Create Environment",
            ),
            Route(environment, routes.delete_environment, methods=["DELETE"], name="deleteEnvironment"),
        ],
        exception_handlers={
            HTTPException: _routing_error,
            RunnerGoneError: _refusal(410),
            RequestTooLarge: _refusal(413),
            InvalidRequest: _refusal(400),
            FileNotAvailable: _refusal(424),
            SupervisorError: _server_failure,
            Exception: _bug,
        },
    )
    routed = routed_operations(app.routes)  # KeyError for a route without its operation
    routes.document = openapi_document(app.routes, settings.server, settings.server.version or __version__)
    open_paths = frozenset(item.route_path for item in routed if not item.operation.token)
    api = _Auth(_BodyLimit(app, settings.server.max_body), settings.server.token, open_paths)
    return CountRequests(api, metrics, app.routes)
