"""What a JSON body's field takes, declared once: checked strictly when a body is read, and written
out as the OpenAPI document's schema of it.

A body is an attrs class whose fields are ``body_field``s: a JSON name, a kind (``Integer``,
``Text``, ``Array``...) and a description. ``Model(cls)`` reads a JSON object into the class
through cattrs (the JSON names, the required fields, the defaults, an unknown field refused), each
field's value through its kind's ``check``, which takes only its own JSON type (``true`` is no
integer, ``"10"`` no number, ``{}`` no array) within its bounds. Whatever is wrong, at any depth,
and whatever raised it, comes out of ``Model.read`` as one InvalidRequest that names the field and
says what is wrong with it.
"""

from __future__ import annotations

import base64
import re
import reprlib
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, Protocol, TypeVar, cast

import attrs
import cattrs
from attrs import NOTHING, frozen
from cattrs.errors import AttributeValidationNote, ClassValidationError, ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn, override

from ..base.errors import InvalidRequest

__all__ = [
    "Array",
    "Base64",
    "BodyField",
    "Boolean",
    "Choice",
    "FieldError",
    "Integer",
    "Kind",
    "Model",
    "Number",
    "StringMap",
    "Text",
    "body_field",
    "fields_of",
    "json_names",
    "object_schema",
    "shown",
]

T = TypeVar("T")
Path = tuple[str | int, ...]
_METADATA: Final = "supervisor.body_field"
_SHOWN: Final = 80  # characters of a value quoted in a message
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FieldError(ValueError):
    """A value that its field does not take: the field's path in the body, and why. ``Model.read``
    turns it into an InvalidRequest whose message names the field: ``copy[2].content is not valid
    base64``."""

    def __init__(self, reason: str, path: Path = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path

    def within(self, *outer: str | int) -> FieldError:
        """The same error, in a field of a field."""
        return FieldError(self.reason, (*outer, *self.path))

    @property
    def message(self) -> str:
        """The reason, after the field's path (or "the request body" for the body itself)."""
        subject = (
            "".join(_step(step) for step in self.path).removeprefix(".") if self.path else "the request body"
        )
        return f"{subject} {self.reason}"


def _step(step: str | int) -> str:
    if isinstance(step, int):
        return f"[{step}]"
    return f".{step}" if _IDENTIFIER.fullmatch(step) else f"[{shown(step)}]"


def shown(value: Any) -> str:
    """A value as a message quotes it: its repr, cut short, nested values elided ("[[[...]]]")."""
    quoting = reprlib.Repr()
    quoting.maxlevel, quoting.maxdict, quoting.maxlist = 2, 4, 6
    quoting.maxstring, quoting.maxother, quoting.maxlong = _SHOWN, _SHOWN, _SHOWN
    try:
        return quoting.repr(value)
    except ValueError:  # an integer of more digits than Python writes out
        return "an integer of thousands of digits"


class Kind(Protocol):
    """What a field takes: ``check`` returns the value as the body's class holds it, or raises
    FieldError; ``schema`` is its JSON Schema (OpenAPI 3.0's dialect)."""

    def check(self, value: Any) -> Any:
        """The value as the body's class holds it, or FieldError."""

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of what the field takes."""


@frozen
class BodyField:
    """A field's JSON name, kind and description (the attrs field's metadata)."""

    name: str
    kind: Kind
    description: str


def body_field(name: str, kind: Kind, description: str = "", *, default: Any = NOTHING) -> Any:
    """An attrs field that a body holds under the JSON name ``name``; required unless it has a default."""
    return attrs.field(default=default, metadata={_METADATA: BodyField(name, kind, description)})


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@frozen
class Integer:
    """A JSON integer within ``minimum`` and ``maximum`` (a float is none, even 10.0)."""

    minimum: int | None = None
    maximum: int | None = None

    def check(self, value: Any) -> int:
        """The value, if it is an integer within the bounds."""
        low, high = self.minimum, self.maximum
        if not _is_integer(value) or (low is not None and value < low) or (high is not None and value > high):
            bounds = "" if low is None or high is None else f" from {low} to {high}"
            raise FieldError(f"must be an integer{bounds}, got {shown(value)}")
        return int(value)

    def schema(self) -> dict[str, Any]:
        """``integer`` with its bounds."""
        bounds = {"minimum": self.minimum, "maximum": self.maximum}
        return {"type": "integer", **{k: v for k, v in bounds.items() if v is not None}}


@frozen
class Number:
    """A JSON number above ``above`` and at most ``maximum``, as a float."""

    above: int
    maximum: int

    def check(self, value: Any) -> float:
        """The value as a float, if it is a number within the bounds."""
        if (
            isinstance(value, float | int)
            and not isinstance(value, bool)
            and self.above < value <= self.maximum
        ):
            return float(value)
        raise FieldError(
            f"must be a number above {self.above} and at most {self.maximum}, got {shown(value)}"
        )

    def schema(self) -> dict[str, Any]:
        """``number`` with its bounds."""
        return {"type": "number", "minimum": self.above, "exclusiveMinimum": True, "maximum": self.maximum}


@frozen
class Boolean:
    """``true`` or ``false``."""

    def check(self, value: Any) -> bool:
        """The value, if it is a boolean."""
        if not isinstance(value, bool):
            raise FieldError(f"must be true or false, got {shown(value)}")
        return value

    def schema(self) -> dict[str, Any]:
        """``boolean``."""
        return {"type": "boolean"}


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise FieldError(f"must be a string, got {shown(value)}")
    _check_text(value)
    return value


def _check_text(text: str) -> None:
    """Refuse a NUL byte, and a lone surrogate (``"\\ud800"``): no Unicode text, nothing to pass on."""
    if "\0" in text:
        raise FieldError("must not contain NUL bytes")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            surrogate = f"\\u{ord(text[exc.start]):04x}"
            raise FieldError(f"is not Unicode text: it has a lone surrogate ({surrogate})") from None


@frozen
class Text:
    """A JSON string without NUL bytes; with ``blank`` False, one with more than white space; with
    ``refuses``, one without those characters (``refused`` says them)."""

    blank: bool = True
    refuses: str = ""
    refused: str = ""
    max_length: int | None = None

    def check(self, value: Any) -> str:
        """The value, if it is a string that the field takes."""
        text = _string(value)
        if not self.blank and not text.strip():
            raise FieldError("must be a non-empty string")
        if self.max_length is not None and len(text) > self.max_length:
            raise FieldError(f"must be at most {self.max_length} characters long")
        if self.refuses and any(character in text for character in self.refuses):
            raise FieldError(f"must not contain {self.refused or shown(self.refuses)}")
        return text

    def schema(self) -> dict[str, Any]:
        """``string`` with its lengths, and a pattern for what it refuses (or for non-blank text)."""
        schema: dict[str, Any] = {"type": "string"}
        if not self.blank:
            schema["minLength"] = 1
        if self.max_length is not None:
            schema["maxLength"] = self.max_length
        if self.refuses:
            schema["pattern"] = f"^[^{re.escape(self.refuses)}]*$"
        elif not self.blank:
            schema["pattern"] = r"\S"
        return schema


@frozen
class Choice:
    """One of a few strings."""

    values: tuple[str, ...]

    def check(self, value: Any) -> str:
        """The value, if it is one of the choices."""
        if value not in self.values:
            raise FieldError(f"must be one of {', '.join(self.values)}, got {shown(value)}")
        return str(value)

    def schema(self) -> dict[str, Any]:
        """``string`` with its choices."""
        return {"type": "string", "enum": list(self.values)}


@frozen
class Base64:
    """A string of standard base64 (with padding), as the bytes it encodes."""

    def check(self, value: Any) -> bytes:
        """The bytes that the value encodes, if it is base64."""
        text = _string(value)
        try:
            return base64.b64decode(text, validate=True)
        except ValueError:  # binascii.Error, or a character past ASCII
            raise FieldError("is not valid base64") from None

    def schema(self) -> dict[str, Any]:
        """``string`` of format ``byte``."""
        return {"type": "string", "format": "byte"}


@frozen
class Array:
    """A JSON array of ``items``, as a tuple; ``null`` is an empty one if ``nullable`` (as Go reads it)."""

    items: Kind
    nullable: bool = False

    def check(self, value: Any) -> tuple[Any, ...]:
        """The items, each checked."""
        if value is None and self.nullable:
            return ()
        if not isinstance(value, list):
            raise FieldError(f"must be an array{' or null' if self.nullable else ''}, got {shown(value)}")
        return tuple(_within(index, self.items, item) for index, item in enumerate(value))

    def schema(self) -> dict[str, Any]:
        """``array`` of the items' schema."""
        return {
            "type": "array",
            "items": self.items.schema(),
            **({"nullable": True} if self.nullable else {}),
        }


@frozen
class StringMap:
    """A JSON object of string values; ``null`` is an empty one if ``nullable``. What a name may
    be beyond text is the domain's to check (OpenAPI 3.0 has no ``propertyNames`` to say it)."""

    nullable: bool = False

    def check(self, value: Any) -> dict[str, str]:
        """The object, each value checked."""
        if value is None and self.nullable:
            return {}
        if not isinstance(value, dict):
            kind = "an object of string values"
            raise FieldError(f"must be {kind}{' or null' if self.nullable else ''}, got {shown(value)}")
        return {_string_name(name): _within(name, _STRING, item) for name, item in value.items()}

    def schema(self) -> dict[str, Any]:
        """``object`` of strings."""
        return {
            "type": "object",
            **({"nullable": True} if self.nullable else {}),
            "additionalProperties": _STRING.schema(),
        }


def _string_name(name: str) -> str:
    try:
        _check_text(name)
    except FieldError as exc:
        raise FieldError(f"has a name that {exc.reason}") from None
    return name


def _within(step: str | int, kind: Kind, value: Any) -> Any:
    """``kind.check(value)``, its error (any error) placed at ``step``."""
    try:
        return kind.check(value)
    except FieldError as exc:
        raise exc.within(step) from None
    except Exception as exc:
        raise FieldError(f"is not valid: {exc}", (step,)) from exc


_STRING: Final = Text()


@frozen
class Model(Generic[T]):
    """A JSON object read into the attrs class ``cls``, whose fields are all ``body_field``s. With a
    ``component``, its schema is a reference to the document's schema of that name."""

    cls: type[T]
    component: str | None = None
    _structure: Callable[[Mapping[str, Any]], T] = attrs.field(init=False, eq=False, repr=False)

    @_structure.default
    def _make_structure(self) -> Callable[[Mapping[str, Any]], T]:
        def hook(kind: Kind) -> Callable[[Any, Any], Any]:
            return lambda value, _type: kind.check(value)

        overrides = {
            field.name: override(rename=spec.name, struct_hook=hook(spec.kind))
            for field, spec in _fields(self.cls)
        }
        converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True)
        return make_dict_structure_fn(
            self.cls, converter, _cattrs_use_linecache=False, **cast(dict[str, Any], overrides)
        )

    def read(self, value: Any) -> T:
        """The value read into the class, or InvalidRequest naming the field that is wrong."""
        try:
            return self.check(value)
        except FieldError as exc:
            raise InvalidRequest(exc.message) from None

    def check(self, value: Any) -> T:
        """The value read into the class."""
        if not isinstance(value, dict):
            raise FieldError(f"must be a JSON object, got {shown(value)}")
        try:
            return self._structure(value)
        except ClassValidationError as group:
            raise self._first_error(group) from None

    def _first_error(self, group: ClassValidationError) -> FieldError | InvalidRequest:
        """The error to report, the path in it as JSON names: an unknown field first, then the
        fields in their order, then what the class itself refused (an InvalidRequest as it is)."""
        names = {field.name: spec.name for field, spec in _fields(self.cls)}
        unknown = [e for e in group.exceptions if isinstance(e, ForbiddenExtraKeysError)]
        if unknown:
            return FieldError(f"has an unknown field {shown(sorted(unknown[0].extra_fields)[0])}")
        error = group.exceptions[0]
        notes = [n for n in getattr(error, "__notes__", ()) if isinstance(n, AttributeValidationNote)]
        if not notes:  # the class refused the fields together
            return error if isinstance(error, InvalidRequest) else FieldError(f"is not valid: {error}")
        name = names[notes[-1].name]
        if isinstance(error, FieldError):
            return error.within(name)
        if type(error) is KeyError and error.args == (name,):
            return FieldError("is required", (name,))
        return FieldError(f"is not valid: {error}", (name,))

    def schema(self) -> dict[str, Any]:
        """The class's schema, or a reference to it."""
        if self.component is not None:
            return {"$ref": f"#/components/schemas/{self.component}"}
        return object_schema(self.cls)


def _fields(cls: type) -> list[tuple[attrs.Attribute[Any], BodyField]]:
    return [(field, field.metadata[_METADATA]) for field in attrs.fields(cls)]


def fields_of(cls: type) -> tuple[BodyField, ...]:
    """A body class's fields, in order."""
    return tuple(spec for _, spec in _fields(cls))


def json_names(cls: type) -> tuple[str, ...]:
    """The JSON names of a body class's fields."""
    return tuple(spec.name for spec in fields_of(cls))


def object_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema of a body class: its fields, those without a default required, no others."""
    properties = {}
    required = []
    for field, spec in _fields(cls):
        schema = spec.kind.schema()
        if spec.description:
            schema = {**schema, "description": spec.description}
        if field.default is NOTHING:
            required.append(spec.name)
        elif isinstance(field.default, bool | int | str) and "$ref" not in schema:
            schema = {**schema, "default": field.default}
        properties[spec.name] = schema
    return {
        "type": "object",
        "properties": properties,
        **({"required": required} if required else {}),
        "additionalProperties": False,
    }
