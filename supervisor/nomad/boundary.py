"""Where Nomad's HTTP failures become ours: status codes and httpx transport errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import httpx

from ..base.errors import NomadNotFound, NomadPermissionDenied, NomadRequestError, NomadUnavailableError

__all__ = ["release_response", "translate_status", "translate_transport_errors"]

# Nomad answers these with 500 although no retry can help (nomad-api.md §4, §6).
_TERMINAL_500_TEXTS: Final = (
    "not found",
    "invalid scheduling eligibility",
    "can not set node's scheduling eligibility",
    "Enforcing job modify index",
    "validation failed",
)


def translate_status(status_code: int, body: str, what: str) -> Exception | None:
    """The error for a Nomad answer, or None for a success."""
    if status_code < 400:
        return None
    if status_code == 403:
        return NomadPermissionDenied(what, status_code=403, body=body)
    if status_code == 404:
        return NomadNotFound(what, status_code=404, body=body)
    if status_code < 500:
        return NomadRequestError(what, status_code=status_code, body=body)
    if any(text in body for text in _TERMINAL_500_TEXTS):
        return NomadRequestError(what, status_code=status_code, body=body)
    return NomadUnavailableError(what, status_code=status_code, body=body)


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
