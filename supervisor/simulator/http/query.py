"""Query parameters as Nomad's agent reads them (``command/agent/http.go``), with Go's parsers and
Go's texts for what they refuse.

- ``parse_query``: the options every read takes (the agent's ``parse``), in its order: ``stale``
  (present and empty means true; else ``strconv.ParseBool``, 400 ``Expect `true` or `false` for
  `stale` query string parameter``), ``per_page`` (``ParseInt``, 400 ``Expect a number for
  `per_page` query string parameter``), ``wait`` (``time.ParseDuration``, 400 ``Invalid wait
  time``) and ``index`` (``ParseUint``, 400 ``Invalid index``). An empty value is no value.
- ``query_bool``: a boolean flag through ``strconv.ParseBool`` (``1 t T TRUE true True``, ``0 f F
  FALSE false False``); anything else is Nomad's 500 ``Failed to parse value of "meta" (x) as a
  bool: strconv.ParseBool: parsing "x": invalid syntax``.
"""

from __future__ import annotations

import re
from typing import Final

from attrs import frozen

from .errors import NomadError
from .server import Request

__all__ = [
    "QueryOptions",
    "go_parse_bool",
    "go_quote",
    "parse_go_duration_ns",
    "parse_query",
    "query_bool",
    "query_int",
]

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT: Final = re.compile(r"[+-]?[0-9]+")
_UINT: Final = re.compile(r"[0-9]+")
_UNITS_NS: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_MAX_DURATION: Final = 1 << 63
_GO_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_quote(text: str) -> str:
    """Go's ``strconv.Quote`` (and ``%q``): double quotes, Go's escapes."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def go_parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``; ValueError with Go's text."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"strconv.ParseBool: parsing {go_quote(text)}: invalid syntax")


def _invalid_duration(text: str) -> ValueError:
    return ValueError(f"time: invalid duration {go_quote(text)}")


def _duration_part(rest: str, original: str) -> tuple[int, str]:
    """One ``[0-9]*(.[0-9]*)?unit`` of a Go duration: its nanoseconds and what follows it."""
    whole = re.match(r"[0-9]*", rest)
    digits = whole.group() if whole else ""
    rest = rest[len(digits) :]
    fraction = ""
    had_dot = rest.startswith(".")
    if had_dot:
        frac = re.match(r"[0-9]*", rest[1:])
        fraction = frac.group() if frac else ""
        rest = rest[1 + len(fraction) :]
    if not digits and not fraction:
        raise _invalid_duration(original)
    unit_match = re.match(r"[^0-9.]*", rest)
    unit = unit_match.group() if unit_match else ""
    if not unit:
        raise ValueError(f"time: missing unit in duration {go_quote(original)}")
    if unit not in _UNITS_NS:
        raise ValueError(f"time: unknown unit {go_quote(unit)} in duration {go_quote(original)}")
    scale = _UNITS_NS[unit]
    value = int(digits or "0")
    if value > _MAX_DURATION // scale:
        raise _invalid_duration(original)
    value *= scale
    if fraction and int(fraction):
        # Go adds the fraction in float64 arithmetic, truncated.
        value += int(float(int(fraction)) * (float(scale) / float(10 ** len(fraction))))
    return value, rest[len(unit) :]


def parse_go_duration_ns(text: str) -> int:
    """Go's ``time.ParseDuration`` in integer nanoseconds ("1m30s", "-1.5h", "250ms", "0");
    ValueError with Go's text."""
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise _invalid_duration(text)
    total = 0
    while rest:
        if not (rest[0] == "." or rest[0].isdigit()):
            raise _invalid_duration(text)
        value, rest = _duration_part(rest, text)
        total += value
        if total > _MAX_DURATION:
            raise _invalid_duration(text)
    if not negative and total > _MAX_DURATION - 1:
        raise _invalid_duration(text)
    return -total if negative else total


def query_bool(request: Request, name: str, *, shown: str = "") -> bool | None:
    """The agent's ``parseBool``: None when absent or empty; a 500 with Nomad's text when Go's
    ``ParseBool`` refuses it (``shown``: the name as the message writes it, ``"name"`` unless
    given)."""
    raw = request.arg(name)
    if not raw:
        return None
    try:
        return go_parse_bool(raw)
    except ValueError as error:
        label = shown or go_quote(name)
        raise NomadError(500, f"Failed to parse value of {label} ({raw}) as a bool: {error}") from None


def query_int(request: Request, name: str) -> int | None:
    """The agent's ``parseInt`` (``strconv.Atoi``): None when absent or empty, else a 500."""
    raw = request.arg(name)
    if not raw:
        return None
    if not _INT.fullmatch(raw) or not -(2**63) <= int(raw) < 2**63:
        reason = "invalid syntax" if not _INT.fullmatch(raw) else "value out of range"
        raise NomadError(
            500,
            f"Failed to parse value of {go_quote(name)} ({raw}) as a int: "
            f"strconv.Atoi: parsing {go_quote(raw)}: {reason}",
        )
    return int(raw)


@frozen
class QueryOptions:
    """A read's options: ``index`` 0 means no blocking; ``wait`` in seconds, 0 when not given."""

    stale: bool = False
    per_page: int = 0
    next_token: str = ""
    filter: str = ""
    prefix: str = ""
    wait: float = 0.0
    index: int = 0


def _stale(request: Request) -> bool:
    if not request.has_arg("stale"):
        return False
    raw = request.arg("stale")
    if not raw:
        return True
    try:
        return go_parse_bool(raw)
    except ValueError:
        raise NomadError(400, "Expect `true` or `false` for `stale` query string parameter") from None


def parse_query(request: Request) -> QueryOptions:
    """The options every read takes, checked in the agent's order."""
    stale = _stale(request)
    raw_per_page = request.arg("per_page")
    per_page = 0
    if raw_per_page:
        if not _INT.fullmatch(raw_per_page) or not -(2**31) <= int(raw_per_page) < 2**31:
            raise NomadError(400, "Expect a number for `per_page` query string parameter")
        per_page = int(raw_per_page)
    wait = 0.0
    if raw_wait := request.arg("wait"):
        try:
            wait = parse_go_duration_ns(raw_wait) / 1e9
        except ValueError:
            raise NomadError(400, "Invalid wait time") from None
    index = 0
    if raw_index := request.arg("index"):
        if not _UINT.fullmatch(raw_index) or int(raw_index) >= 2**64:
            raise NomadError(400, "Invalid index")
        index = int(raw_index)
    return QueryOptions(
        stale=stale,
        per_page=per_page,
        next_token=request.arg("next_token"),
        filter=request.arg("filter"),
        prefix=request.arg("prefix"),
        wait=wait,
        index=index,
    )
