"""Performance traces of the API's requests in Sentry, continued from the caller's trace.

CodeOcean's Sentry SDK sends ``sentry-trace`` and ``baggage`` headers on its calls; a traced route
continues that trace (``sentry_sdk.continue_trace``), so that a claim, a file copy or an execution
shows in Sentry under the CodeOcean request that asked for it, and follows the sample decision the
caller made. A request without the headers starts a trace of its own, sampled at
``SENTRY_TRACES_SAMPLE_RATE``. Each transaction is named by method and route template
(``PATCH /api/v1/runners/{runner_id}/files``), one group per route rather than per runner, and holds
one span named as Poseidon names its own (``api.runner.claim`` "Claim Runner", ``api.fs.update``
"Update File System", ``api.runner.connect`` "Execute Interactively" ...); an execution's run is a
span of the WebSocket's transaction (``nomad.execute.tty``). sentry-sdk's httpx integration adds a
span for each call to Nomad made meanwhile. Tags: ``environment_id`` (set by the handler, through
``tag_environment``) and ``outcome``: ``ok``, the answer's ``errorCode`` (``NOMAD_OVERLOAD``...),
``status 410``..., ``closed 1011`` for a WebSocket, ``cancelled``. Nothing of the request but these
is recorded: not its headers (the ``Poseidon-Token``), not its body (the runner's files).

Why not sentry-sdk's Starlette (ASGI) integration, though it works under trio and our server (it
keeps the request's scope in an isolation scope, a contextvar, and each connection is its own trio
task, whose context is its own copy): it attaches the request's headers and, up to
``max_request_body_size``, its body to every transaction and error event, and the token header is
not on its list of sensitive headers, nor are the files of a PATCH anything it knows to leave out;
it patches Starlette itself for every app in the process; and it names a transaction by route
without its method. It is switched off (``sentry.py``) and the routes are traced here, each
wrapped in ``TracedRoute`` when ``create_app`` builds it. With tracing off no route is wrapped and
sentry-sdk is not imported by this module: what is left is a look for it in ``sys.modules`` and
``run_span``'s shared do-nothing context manager.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Final

import orjson
import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from sentry_sdk.tracing import Transaction

__all__ = ["TracedRoute", "run_span", "tag_environment", "tracing_enabled"]

# The headers a trace continues from; no other header is read.
_PROPAGATION: Final = (b"sentry-trace", b"baggage")
# An error answer's body is read for its errorCode only up to this size.
_ERROR_BODY_LIMIT: Final = 4096
_ENVIRONMENT_TAG: Final = "environment_id"
_OUTCOME_TAG: Final = "outcome"

_NO_SPAN: Final = contextlib.nullcontext()


def tracing_enabled() -> bool:
    """Whether Sentry traces requests. Its client is one per process (``sentry_sdk.init``), so it
    is asked rather than mirrored here; with sentry-sdk never imported, nothing traces."""
    sdk = sys.modules.get("sentry_sdk")
    if sdk is None:
        return False
    client = sdk.get_client()
    return bool(client.is_active() and client.options.get("traces_sample_rate"))


def tag_environment(environment_id: int) -> None:
    """Tag the request's transaction (and any error reported while it runs) with its environment."""
    if tracing_enabled():
        import sentry_sdk

        sentry_sdk.set_tag(_ENVIRONMENT_TAG, str(environment_id))


def run_span(op: str, description: str) -> contextlib.AbstractContextManager[object]:
    """A span of the request's transaction, for a part of it worth timing on its own; with tracing
    off, one shared context manager that does nothing."""
    if not tracing_enabled():
        return _NO_SPAN
    import sentry_sdk

    return sentry_sdk.start_span(op=op, name=description)


class TracedRoute:
    """ASGI middleware of one route: the request as a transaction continued from its headers, the
    route's work as a span named ``op`` and ``description``, its answer as the outcome."""

    def __init__(self, app: ASGIApp, *, path: str, op: str, description: str) -> None:
        self.app = app
        self.path = path
        self.op = op
        self.description = description

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The route's work inside a transaction of its own scope, forked from this task's: two
        requests on two connections (two trio tasks) never share one."""
        import sentry_sdk

        websocket = scope["type"] == "websocket"
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers") or ()
            if name in _PROPAGATION
        }
        with sentry_sdk.isolation_scope():
            transaction = sentry_sdk.continue_trace(
                headers,
                op="websocket.server" if websocket else "http.server",
                name=f"{scope.get('method', 'GET')} {self.path}",
                source="route",
                origin="auto.http.supervisor",
            )
            with sentry_sdk.start_transaction(transaction):
                answer = _Answer(transaction)
                try:
                    with sentry_sdk.start_span(op=self.op, name=self.description):
                        await self.app(scope, receive, answer.watching(send))
                except trio.Cancelled:
                    transaction.set_tag(_OUTCOME_TAG, "cancelled")
                    raise
                except BaseException:
                    answer.status(500)
                    transaction.set_tag(_OUTCOME_TAG, "UNKNOWN")  # a bug's answer, as app.py's
                    raise
                answer.finish()


class _Answer:
    """What the route answered, read from the messages it sends."""

    def __init__(self, transaction: Transaction) -> None:
        self._transaction = transaction
        self._status: int | None = None
        self._outcome: str | None = None
        self._error_body = b""

    def watching(self, send: Send) -> Send:
        async def watched(message: Message) -> None:
            self._saw(message)
            await send(message)

        return watched

    def status(self, status: int) -> None:
        self._status = status
        self._transaction.set_http_status(status)

    def finish(self) -> None:
        if self._outcome is None and self._status is not None:
            self._outcome = "ok" if self._status < 400 else self._error_code() or f"status {self._status}"
        if self._outcome is not None:
            self._transaction.set_tag(_OUTCOME_TAG, self._outcome)

    def _saw(self, message: Message) -> None:
        kind = message["type"]
        if kind in ("http.response.start", "websocket.http.response.start"):
            self.status(int(message["status"]))
        elif kind in ("http.response.body", "websocket.http.response.body"):
            if self._status is not None and self._status >= 400:
                self._error_body = (self._error_body + bytes(message.get("body", b"")))[:_ERROR_BODY_LIMIT]
        elif kind == "websocket.accept":
            self.status(101)
        elif kind == "websocket.close" and self._status == 101:
            code = int(message.get("code") or 1000)
            self._transaction.set_data("websocket.close_code", code)
            self._outcome = "ok" if code == 1000 else f"closed {code}"

    def _error_code(self) -> str | None:
        try:
            answer: Any = orjson.loads(self._error_body)
        except orjson.JSONDecodeError:
            return None
        code = answer.get("errorCode") if isinstance(answer, dict) else None
        return str(code) if code else None
