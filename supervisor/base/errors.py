"""Every exception the supervisor raises on purpose.

Foreign errors (httpx, trio-websocket, OS) are translated at the boundary that meets them into the
most specific class here, with the original chained as ``__cause__``.

    SupervisorError
    ├── TransientError                 retry with backoff; the same request may succeed later
    │   ├── NomadUnavailableError      connection refused/reset, timeout, 5xx ("No cluster leader")
    │   │   └── NomadAddressUnreachable no TCP connection to the address in time: nothing was sent
    │   ├── NomadUnreachable           the event stream stayed down for the whole admission wait
    │   ├── EventStreamError           the event stream ended; reconnect at last index + 1
    │   │   ├── StreamConnectionLost   the connection dropped (mid-line or between lines)
    │   │   ├── StreamEnded            the server ended the body cleanly with nothing after it
    │   │   ├── StreamHeartbeatTimeout no line and no heartbeat within the deadline
    │   │   ├── StreamServerError      the body ended with a line of text that is not JSON
    │   │   └── StreamLineTooLong      a line exceeded the configured limit
    │   └── ExecConnectionLost         the exec WebSocket dropped before ``exited``: outcome unknown
    └── TerminalError                  never retried: the request itself is wrong or refused
        ├── NomadRequestError          the request's fault: 400, or a 500 that says so (validation)
        │   ├── NomadPermissionDenied  403: the token's fault
        │   ├── NomadNotFound          404, or a 500 "... not found": the object's absence
        │   └── NomadConflict          409, or a 500 "Enforcing job modify index": a conflict
        ├── ExecRejected               Nomad closed the exec WebSocket with 1008/1011 and a reason
        │   ├── ExecAllocationUnknown  Nomad no longer knows the allocation: the runner is gone
        │   └── ExecAgentUnreachable   the server could not reach the client agent: nothing ran
        ├── RunnerGoneError            the runner is gone or moving: its client takes another (410)
        ├── UnknownEnvironment         no execution environment has this ID (404)
        ├── NoIdleRunner               the environment has no idle runner now (500 NOMAD_OVERLOAD)
        ├── FileNotAvailable           a file does not exist or cannot be read (424)
        ├── FileOperationFailed        a file command in a runner failed (its stderr in the message)
        ├── RunnerCommandFailed        a helper command the daemon ran in a runner exited non-zero
        ├── ConfigError                a setting is missing or invalid
        │   └── LockRefused            Nomad refuses the [ha] lock for good (path, TTL, token)
        └── InvalidRequest             a client's request body or parameters are invalid (HTTP 400)
            └── RequestTooLarge        a request body over ``server.max_body`` (HTTP 413)

Programming errors (a bug here, not a condition of the world) are ``RuntimeError`` subclasses and
never part of this tree.

Exception groups: trio's nurseries raise them strict. Code that needs one error from a group (an exec
session raises one at a time) takes the group's leaves with ``leaves``, never only the first one
blindly.
"""

from __future__ import annotations

from typing import NoReturn

import trio

__all__ = [
    "ConfigError",
    "EventStreamError",
    "ExecAgentUnreachable",
    "ExecAllocationUnknown",
    "ExecConnectionLost",
    "ExecRejected",
    "FileNotAvailable",
    "FileOperationFailed",
    "InvalidRequest",
    "LockRefused",
    "NoIdleRunner",
    "NomadAddressUnreachable",
    "NomadConflict",
    "NomadNotFound",
    "NomadPermissionDenied",
    "NomadRequestError",
    "NomadUnavailableError",
    "NomadUnreachable",
    "RequestTooLarge",
    "RunnerCommandFailed",
    "RunnerGoneError",
    "StreamConnectionLost",
    "StreamEnded",
    "StreamHeartbeatTimeout",
    "StreamLineTooLong",
    "StreamServerError",
    "SupervisorError",
    "TerminalError",
    "TransientError",
    "UnknownEnvironment",
    "leaves",
    "raise_alone",
]


class SupervisorError(Exception):
    """The root of every error the supervisor raises on purpose."""


class TransientError(SupervisorError):
    """A failure of the moment: retrying with backoff may succeed."""


class TerminalError(SupervisorError):
    """A failure of the request itself: retrying cannot succeed."""


class _NomadHTTPMixin:
    """Carries what Nomad answered: the status code and its text body."""

    status_code: int | None
    body: str

    def _init_http(self, message: str, *, status_code: int | None, body: str) -> str:
        self.status_code = status_code
        self.body = body
        if status_code is None:
            return message
        return f"{message} (HTTP {status_code}: {body.strip() or 'no body'})"


class NomadUnavailableError(_NomadHTTPMixin, TransientError):
    """Nomad could not be reached or answered 5xx; ``status_code`` is None without an answer."""

    def __init__(self, message: str, *, status_code: int | None = None, body: str = "") -> None:
        super().__init__(self._init_http(message, status_code=status_code, body=body))


class NomadAddressUnreachable(NomadUnavailableError):
    """No TCP connection to a Nomad address (refused, unreachable, or not within its timeout):
    nothing was sent there."""


class NomadRequestError(_NomadHTTPMixin, TerminalError):
    """Nomad refused the request for good (``nomad.boundary`` says which answers do); ``body``
    holds Nomad's text."""

    def __init__(self, message: str, *, status_code: int, body: str = "") -> None:
        super().__init__(self._init_http(message, status_code=status_code, body=body))


class NomadPermissionDenied(NomadRequestError):
    """403: the ACL token is missing, unknown or lacks a capability."""


class NomadNotFound(NomadRequestError):
    """404: the job, allocation, node or evaluation does not exist."""


class NomadConflict(NomadRequestError):
    """409: the object changed or is held (a lock, a compare-and-set, a job's modify index)."""


class NomadUnreachable(TransientError):
    """The event stream stayed down for the whole admission wait: new work is refused for now."""


class EventStreamError(TransientError):
    """The event stream ended; ``last_index`` is the last batch index that was delivered."""

    def __init__(self, message: str, *, last_index: int = 0) -> None:
        super().__init__(message)
        self.last_index = last_index


class StreamConnectionLost(EventStreamError):
    """The connection dropped (reset, EOF inside a chunked body, or mid-line)."""


class StreamEnded(EventStreamError):
    """The server closed the body cleanly; Nomad does this on shutdown or when it ends a subscription."""


class StreamHeartbeatTimeout(EventStreamError):
    """No line arrived within the deadline, although Nomad sends ``{}`` every 30 s."""


class StreamServerError(EventStreamError):
    """The body ended with text that is not JSON: Nomad's own error message (Nomad <= 1.11.1)."""

    def __init__(self, text: str, *, last_index: int = 0) -> None:
        super().__init__(f"Nomad ended the event stream with an error: {text}", last_index=last_index)
        self.text = text


class StreamLineTooLong(EventStreamError):
    """A line exceeded ``max_line_bytes`` before its newline arrived."""


class ExecConnectionLost(TransientError):
    """The exec WebSocket dropped before ``exited``: the command's outcome is unknown."""


class ExecRejected(TerminalError):
    """Nomad closed the exec WebSocket with a close frame: 1008 for a 4xx cause, 1011 otherwise."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"Nomad refused the exec (close {code}): {reason}")
        self.code = code
        self.reason = reason


class ExecAllocationUnknown(ExecRejected):
    """Nomad refused the exec because it no longer knows the allocation (close 1008 "Unknown
    allocation", or a 404 before the upgrade): the runner is gone with it."""


class ExecAgentUnreachable(ExecRejected):
    """The server could not reach the allocation's client agent ("failed to connect to client ...:
    no path to node"), so nothing ran; the agent may be restarting."""


class RunnerGoneError(TerminalError):
    """The runner is gone (Nomad no longer knows its allocation) or moving (its agent stayed out of
    reach): its client gets 410 and takes another runner."""


class UnknownEnvironment(TerminalError):
    """No execution environment has this ID."""


class NoIdleRunner(TerminalError):
    """The environment has no idle runner at the moment; its pool is refilling."""


class FileNotAvailable(TerminalError):
    """The file does not exist or cannot be read (HTTP 424)."""


class FileOperationFailed(TerminalError):
    """The command in the runner failed; the message carries its stderr."""


class RunnerCommandFailed(TerminalError):
    """A helper command the daemon ran in a runner (reading the task's environment, say) exited with
    a non-zero status."""


class ConfigError(TerminalError):
    """A setting is missing or invalid; the message names the key."""


class LockRefused(ConfigError):
    """Nomad refuses the ``[ha]`` lock for good (its path, its TTL, or the token's rights to it):
    no retry can make this daemon active, so it stops, saying why in one line."""


class InvalidRequest(TerminalError):
    """A client's request is invalid; the message says which field and why."""


class RequestTooLarge(InvalidRequest):
    """A request body is larger than the daemon takes."""


def leaves(error: BaseException) -> list[BaseException]:
    """Every exception inside ``error``, which may be an exception group nested any deep."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def raise_alone(group: BaseExceptionGroup[BaseException]) -> NoReturn:
    """Raise the one exception of a nursery's group by itself, as it was raised (an exception group
    of its own stays whole), with its cause and context; trio's cancellations are left out when
    another exception is there. The group as it is when it holds several."""
    members = list(group.exceptions)
    errors = [member for member in members if not isinstance(member, trio.Cancelled)]
    if len(errors) > 1:
        raise group
    alone = errors[0] if errors else members[0]
    context = alone.__context__
    try:
        raise alone
    finally:
        alone.__context__ = context
