"""A request body's bytes as JSON, on the terms every body of the API is read on.

orjson reads almost every body. What it cannot hold is read again by the standard parser, which
keeps it as the client sent it, so that a 400 can name the field and show it: an integer past 64
bits (orjson turns it into a float that lost its digits), a number past a double's range (``1e400``,
which orjson refuses), kept as an ``OutOfRange`` that no field takes, and a lone surrogate
(``"\\ud800"``, which orjson refuses), kept in its string, which no field takes either. Every
other failure is an InvalidRequest that says what is wrong with the body.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import orjson
from attrs import frozen

from ..base.errors import InvalidRequest

__all__ = ["OutOfRange", "read_json"]

# Floats this large that are whole numbers were integers past 64 bits in the JSON.
_HUGE: Final = 2.0**63
_ORJSON_INFINITY: Final = "number is infinity"
_ORJSON_DEPTH: Final = "depth limit exceeded"
_ORJSON_SURROGATE: Final = "surrogate"


@frozen
class OutOfRange:
    """A JSON number past what a double holds (``1e400``), as the client wrote it."""

    text: str

    def __repr__(self) -> str:
        return f"{self.text} (a number out of range)"


def read_json(body: bytes) -> Any:
    """The body's JSON document, or InvalidRequest saying why there is none."""
    if not body.strip():
        raise InvalidRequest("the request body is empty")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if exc.msg.startswith(_ORJSON_INFINITY) or _ORJSON_SURROGATE in exc.msg:
            return _read_exactly(body)
        if exc.msg.startswith(_ORJSON_DEPTH):
            raise InvalidRequest("the request body is nested more than 1,024 deep") from None
        raise InvalidRequest(f"the request body is not JSON: {exc}") from None
    return _read_exactly(body) if _has_huge_integer(document) else document


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


def _read_exactly(body: bytes) -> Any:
    """The standard parser's reading: every integer's digits kept, numbers out of range marked,
    lone surrogates kept."""
    try:
        return json.loads(body.decode(), parse_float=_float, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"the request body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except RecursionError:
        raise InvalidRequest("the request body is nested too deep") from None
    except ValueError as exc:  # not JSON, or an integer of more digits than Python converts
        raise InvalidRequest(f"the request body is not JSON we take: {exc}") from None


def _float(text: str) -> float | OutOfRange:
    value = float(text)
    return OutOfRange(text) if math.isinf(value) else value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
