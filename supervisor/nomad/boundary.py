"""Where Nomad's HTTP failures become ours: status codes and httpx transport errors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import attrs
import httpx

from ..base.errors import (
    NomadConflict,
    NomadNotFound,
    NomadPermissionDenied,
    NomadRequestError,
    NomadUnavailableError,
)

__all__ = [
    "MEANINGS",
    "Meaning",
    "in_one_line",
    "meaning_of",
    "release_response",
    "translate_status",
    "translate_transport_errors",
]

_NomadError = type[NomadRequestError] | type[NomadUnavailableError]


@attrs.frozen
class Meaning:
    """What one kind of Nomad answer means: which statuses (and, for a 500, which text) it covers,
    the error it becomes, and why (nomad-api.md §6, §9)."""

    statuses: range
    error: _NomadError
    why: str
    text: re.Pattern[str] | None = None

    def covers(self, status_code: int, body: str) -> bool:
        """Whether an answer with this status and body has this meaning."""
        return status_code in self.statuses and (self.text is None or self.text.search(body) is not None)


def _text(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# Nomad's answers by meaning, the first that covers an answer decides. Only what may succeed later is
# transient: no answer at all (``translate_transport_errors``), no leader, a 5xx of the moment.
MEANINGS: Final = (
    Meaning(range(400, 401), NomadRequestError, "the request is wrong: a parse or validation error"),
    Meaning(range(403, 404), NomadPermissionDenied, "the token is unknown or lacks a capability"),
    Meaning(range(404, 405), NomadNotFound, "the object does not exist"),
    Meaning(range(409, 410), NomadConflict, "the object changed or is held (a lock, a CAS)"),
    Meaning(range(429, 430), NomadUnavailableError, "too many requests for now"),
    Meaning(range(408, 409), NomadUnavailableError, "a proxy's timeout: the request may be sent again"),
    Meaning(range(425, 426), NomadUnavailableError, "a proxy's too early: the request may be sent again"),
    Meaning(range(401, 500), NomadRequestError, "any other 4xx: the request is refused"),
    Meaning(
        range(500, 600),
        NomadUnavailableError,
        "no leader (an election): try again",
        _text("No cluster leader"),
    ),
    Meaning(
        range(500, 501),
        NomadPermissionDenied,
        "a token that is no UUID, which Nomad tried as a workload's signed identity (its own token's read)",
        _text("failed to parse signed token"),
    ),
    Meaning(
        range(500, 501),
        NomadRequestError,
        "a validation failure, in go-multierror's format (job-level texts say nothing more); "
        "forwarded by a follower to the leader, it comes back as an RPC error",
        _text(r"^(?:rpc error: )*\d+ errors? occurred:\n"),
    ),
    Meaning(
        range(500, 501),
        NomadRequestError,
        "a task group's or task's validation failure",
        _text("validation failed"),
    ),
    Meaning(
        range(500, 501),
        NomadConflict,
        "a registration with a stale EnforceIndex: the job changed meanwhile",
        _text("Enforcing job modify index"),
    ),
    Meaning(
        range(500, 501),
        NomadRequestError,
        "a node's eligibility that cannot be set",
        _text("invalid scheduling eligibility|can not set node's scheduling eligibility"),
    ),
    Meaning(
        range(500, 501), NomadNotFound, "an object Nomad looked up and did not find", _text(r"\bnot found\b")
    ),
    Meaning(range(500, 600), NomadUnavailableError, "any other 5xx: a failure of the moment"),
)


def meaning_of(status_code: int, body: str) -> Meaning | None:
    """The meaning of a Nomad answer that is not a success (None for a success)."""
    if status_code < 400:
        return None
    for meaning in MEANINGS:
        if meaning.covers(status_code, body):
            return meaning
    return Meaning(range(status_code, status_code + 1), NomadUnavailableError, "an unknown status")


def translate_status(status_code: int, body: str, what: str) -> Exception | None:
    """The error for a Nomad answer, or None for a success."""
    meaning = meaning_of(status_code, body)
    if meaning is None:
        return None
    return meaning.error(what, status_code=status_code, body=body)


@contextmanager
def translate_transport_errors(what: str) -> Iterator[None]:
    """httpx's transport failures (refused, reset, timeout) as NomadUnavailableError."""
    try:
        yield
    except httpx.TransportError as exc:
        raise NomadUnavailableError(f"{what}: {type(exc).__name__}: {exc}") from exc


def release_response(response: httpx.Response) -> None:
    """Let the response go as soon as nothing refers to it. httpx (0.28) binds each response's
    stream to the response, to time it: a reference cycle that keeps the response and its body
    until the garbage collector's next full pass, which with a large heap comes seldom. A listing
    of 10,000 runners is 16 MB of body. A response that is not closed yet keeps its stream, which
    holds its connection; ``response.content`` stays readable."""
    if response.is_closed:
        response.stream = httpx.ByteStream(b"")


def token_refused(answer: str, needs: str) -> tuple[str, str]:
    """Why Nomad refused the daemon's token (``answer``: Nomad's text), and what to do: ``needs``
    names the capabilities the refused work takes (Nomad's ACL policies)."""
    text = answer.strip() or "Permission denied"
    reason = f"Nomad refuses the daemon's token (403 {text})"
    # Nomad 1.10 answers an unknown token as it answers one without the capability.
    return reason, (
        f"nomad.token (NOMAD_TOKEN) is missing, unknown to this cluster, or its policy lacks what the "
        f"daemon needs ({needs}): `supervisor check` tells which"
    )


_MULTIERROR_HEAD: Final = re.compile(r"(?:rpc error: )?\d+ errors? occurred:")
_ITEM: Final = re.compile(r"\s*\t\* ")


def in_one_line(text: str) -> str:
    """Nomad's refusal in one line: go-multierror's nested ``N errors occurred:`` lists flattened,
    each problem after the group or task it belongs to (``Task group "g" validation failed: Task
    "t" validation failed: minimum MemoryMB value is 10; got 5``), several joined by ``; ``."""
    problems = [p.strip() for p in _ITEM.split(_MULTIERROR_HEAD.sub("", text))]
    joined: list[str] = []
    for problem in (p for p in problems if p):
        if joined and joined[-1].endswith("failed:"):
            joined[-1] = f"{joined[-1]} {problem}"
        else:
            joined.append(problem)
    return "; ".join(joined) or text.strip()
