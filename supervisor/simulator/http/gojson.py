"""Request bodies as Nomad's agent decodes them: Go's ``encoding/json`` into a typed Go struct
(``decodeBody`` in ``command/agent/http.go``), before any handler looks at a field.

A body is read as ``json.Decoder.Decode`` reads it: one value, whatever follows it is ignored;
nothing at all is ``Request body is empty`` (Go's ``http.NoBody``), blanks only ``EOF``, a value cut
short ``unexpected EOF``, and a syntax error the scanner's own text (``invalid character 'x'
looking for beginning of value``). The value is then decoded into the request's type, described
here by ``GoType`` values: keys match fields exactly or else case-insensitively, unknown keys are
ignored, ``null`` leaves a field unset, and a value of the wrong JSON kind is Go's
``UnmarshalTypeError``: ``json: cannot unmarshal string into Go struct field Job.Job.Priority of
type int`` (the innermost struct's name, then the field path from the top).

A decoded body is plain data with Go's field names: dicts for structs and maps, lists, str, bool,
int, float; a field sent as ``null`` is None and a field not sent is absent.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from attrs import frozen

from .goscanner import syntax_error

__all__ = [
    "ANY",
    "BOOL",
    "BYTES",
    "DURATION",
    "FLOAT64",
    "INT",
    "INT8",
    "INT64",
    "STRING",
    "UINT8",
    "UINT64",
    "Custom",
    "GoJSONError",
    "GoType",
    "ListOf",
    "MapOf",
    "Opaque",
    "Struct",
    "decode_body",
    "json_kind",
]


class GoJSONError(Exception):
    """A body Go's decoder refuses; ``text`` is its error's text (Nomad answers it with 400)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class _Number:
    """A JSON number as written: Go parses the literal itself for the field's type."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _Object(list[tuple[str, Any]]):
    """A JSON object's members in order, repeated keys kept (Go applies them one after another)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON to Go


_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_Object, parse_int=_Number, parse_float=_Number, parse_constant=_reject_constant
)
_BLANK: Final = " \t\r\n"


def json_kind(value: object) -> str:
    """The JSON kind of a decoded value, as Go's errors name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, _Number | int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, _Object | dict) else "array"


@frozen
class _Where:
    """Where a value sits: the innermost struct's short name and the field path from the top."""

    struct: str = ""
    path: tuple[str, ...] = ()

    def field(self, struct: str, name: str) -> _Where:
        return _Where(struct, (*self.path, name))


def _type_error(value: str, type_name: str, where: _Where) -> GoJSONError:
    if where.path:
        field = ".".join(where.path)
        return GoJSONError(
            f"json: cannot unmarshal {value} into Go struct field {where.struct}.{field} of type {type_name}"
        )
    return GoJSONError(f"json: cannot unmarshal {value} into Go value of type {type_name}")


class GoType:
    """A Go type a JSON value is decoded into; ``name`` is how Go's errors write it."""

    name: str = ""

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """The value as this type holds it, or GoJSONError as Go's decoder reports it."""
        raise NotImplementedError

    def _mismatch(self, value: Any, where: _Where) -> GoJSONError:
        return _type_error(json_kind(value), self.name, where)


@frozen
class _Scalar(GoType):
    name: str
    kind: str

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        if json_kind(value) != self.kind:
            raise self._mismatch(value, where)
        return value


@frozen
class _Integer(GoType):
    """Go's ints, and ``time.Duration`` (integer nanoseconds): the literal must be a whole number
    in range, else ``number 1.5``."""

    name: str
    low: int
    high: int

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        if not isinstance(value, _Number):
            raise self._mismatch(value, where)
        text = value.text
        digits = text[1:] if text.startswith("-") else text
        if not digits.isdigit() or not self.low <= int(text) <= self.high:
            raise _type_error(f"number {text}", self.name, where)
        return int(text)


@frozen
class _Float(GoType):
    name: str

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        if not isinstance(value, _Number):
            raise self._mismatch(value, where)
        return float(value.text)


@frozen
class _Bytes(GoType):
    """``[]byte``: a base64 string."""

    name: str = "[]uint8"

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        if not isinstance(value, str):
            raise self._mismatch(value, where)
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise GoJSONError(f"illegal base64 data at input byte {_base64_error_at(value)}") from None
        return value


def _base64_error_at(text: str) -> int:
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    return next((i for i, c in enumerate(text) if c not in alphabet), len(text) // 4 * 4)


def _plain(value: Any) -> Any:
    """A decoded JSON value as ``interface{}`` holds it: objects as dicts (the last of a repeated
    key wins), numbers as int when whole, else float."""
    if isinstance(value, _Object):
        return {key: _plain(item) for key, item in value}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, _Number):
        number = float(value.text)
        return int(number) if number.is_integer() and abs(number) < 1e21 else number
    return value


@frozen
class _Any(GoType):
    name: str = "interface {}"

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        return _plain(value)


@frozen
class Opaque(GoType):
    """A struct the simulator keeps as sent: only its JSON kind (an object) is checked."""

    name: str

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        if value is not None and not isinstance(value, _Object):
            raise self._mismatch(value, where)
        return _plain(value)


@frozen
class ListOf(GoType):
    """A Go slice; ``name`` as Go writes it (``[]*api.TaskGroup``)."""

    item: GoType
    name: str

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        if value is None:
            return None
        if not isinstance(value, list) or isinstance(value, _Object):
            raise self._mismatch(value, where)
        # A null element of a struct slice is a zero struct here (Go's nil pointer would panic later).
        zero_struct = isinstance(self.item, Struct)
        return [({} if zero_struct else None) if v is None else self.item.decode(v, where) for v in value]


@frozen
class MapOf(GoType):
    """A Go map with string keys; a repeated key sets the entry again."""

    value: GoType
    name: str

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        if value is None:
            return None
        if not isinstance(value, _Object):
            raise self._mismatch(value, where)
        decoded: dict[str, Any] = into if isinstance(into, dict) else {}
        for key, item in value:
            decoded[key] = None if item is None else self.value.decode(item, where)
        return decoded


class Struct(GoType):
    """A Go struct: ``name`` as Go writes its type (``api.Job``), fields in order; the promoted
    fields of an embedded struct are listed as its own."""

    def __init__(self, name: str, fields: Mapping[str, GoType]) -> None:
        self.name = name
        self.short_name = name.rpartition(".")[2]
        self.fields = dict(fields)
        self._folded = {key.lower(): key for key in reversed(self.fields)}

    def field_named(self, key: str) -> str | None:
        """The field a JSON key sets: the exact name, else the first that matches without case."""
        return key if key in self.fields else self._folded.get(key.lower())

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        if value is None:
            return None
        if not isinstance(value, _Object):
            raise self._mismatch(value, where)
        decoded: dict[str, Any] = into if isinstance(into, dict) else {}
        for key, item in value:
            name = self.field_named(key)
            if name is None:
                continue
            if item is None:
                decoded[name] = None
                continue
            decoded[name] = self.fields[name].decode(
                item, where.field(self.short_name, name), decoded.get(name)
            )
        return decoded


class Custom(GoType):
    """A type with its own ``UnmarshalJSON``: ``decode`` gets the JSON value as plain data."""

    def __init__(self, name: str, decode: Callable[[Any, str], Any]) -> None:
        self.name = name
        self._decode = decode

    def decode(self, value: Any, where: _Where, into: Any = None) -> Any:
        """See ``GoType.decode``."""
        try:
            return self._decode(_plain(value), self.name)
        except GoJSONError as error:
            raise _in_context(error, where) from None


def _in_context(error: GoJSONError, where: _Where) -> GoJSONError:
    """An UnmarshalJSON's type error with the outer field path in front, as Go 1.24 writes it."""
    if not where.path:
        return error
    outer = f"into Go struct field {where.struct}.{'.'.join(where.path)}"
    for inner, replacement in (("into Go struct field .", f"{outer}."), ("into Go value", outer)):
        if inner in error.text:
            return GoJSONError(error.text.replace(inner, replacement, 1))
    return error


STRING: Final = _Scalar("string", "string")
BOOL: Final = _Scalar("bool", "bool")
INT: Final = _Integer("int", -(2**63), 2**63 - 1)
INT8: Final = _Integer("int8", -128, 127)
INT64: Final = _Integer("int64", -(2**63), 2**63 - 1)
UINT8: Final = _Integer("uint8", 0, 255)
UINT64: Final = _Integer("uint64", 0, 2**64 - 1)
DURATION: Final = _Integer("time.Duration", -(2**63), 2**63 - 1)
FLOAT64: Final = _Float("float64")
BYTES: Final = _Bytes()
ANY: Final = _Any()


def decode_body(body: bytes, into: Struct) -> dict[str, Any]:
    """The request body decoded into ``into`` as Nomad's ``decodeBody`` does; GoJSONError with
    Go's text when it cannot be (``null`` decodes to an empty struct, as Go leaves it zero)."""
    if not body:
        raise GoJSONError("Request body is empty")
    text = body.decode("utf-8", errors="replace").lstrip(_BLANK)
    if not text:
        raise GoJSONError("EOF")
    try:
        value, _ = _DECODER.raw_decode(text)
    except (ValueError, RecursionError):
        raise GoJSONError(syntax_error(text) or "exceeded max depth") from None
    # Python's parser takes the longest number it can ("1.5" of "1.5e"); Go's needs all of it.
    if isinstance(value, _Number) and (problem := syntax_error(text)):
        raise GoJSONError(problem)
    decoded = into.decode(value, _Where())
    return decoded if isinstance(decoded, dict) else {}
