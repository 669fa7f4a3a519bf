"""The tree HCL2's native syntax reads into (hcl's ``Range``, ``Diagnostic``, ``Attribute``,
``Block``, ``Body``), its expressions already evaluated, and the text hcl makes of a value inside a
template."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final, final

from attrs import frozen

__all__ = [
    "DEFERRED",
    "Attribute",
    "Block",
    "Body",
    "Diagnostic",
    "Expr",
    "HclError",
    "Pos",
    "Range",
    "as_string",
    "joined",
    "number",
    "to_bool",
    "to_number",
    "to_string",
]


@final
@frozen
class Pos:
    """A place in the source: line and column from 1, and the offset in characters."""

    line: int
    column: int
    offset: int


@final
@frozen
class Range:
    """A span of the source, written as hcl writes it."""

    filename: str
    start: Pos
    end: Pos

    def __str__(self) -> str:
        start, end = self.start, self.end
        if start.line == end.line:
            return f"{self.filename}:{start.line},{start.column}-{end.column}"
        return f"{self.filename}:{start.line},{start.column}-{end.line},{end.column}"

    def at_start(self) -> Range:
        """The empty range where this one starts (hcl's ``MissingItemRange``)."""
        return Range(self.filename, self.start, self.start)


@final
@frozen
class Diagnostic:
    """One of hcl's error diagnostics."""

    summary: str
    detail: str
    subject: Range | None = None

    def __str__(self) -> str:
        return f"{self.subject if self.subject is not None else '<nil>'}: {self.summary}; {self.detail}"


class HclError(Exception):
    """A jobspec Nomad refuses, with hcl's diagnostics and the text Nomad's error carries."""

    def __init__(self, diagnostics: Sequence[Diagnostic], *, joined: bool = False) -> None:
        self.diagnostics = tuple(diagnostics)
        if joined:  # jobspec2 writes the decoding phase's diagnostics one a line
            text = "\n".join(str(d) for d in self.diagnostics)
        elif len(self.diagnostics) == 1:  # hcl.Diagnostics.Error()
            text = str(self.diagnostics[0])
        else:
            text = f"{self.diagnostics[0]}, and {len(self.diagnostics) - 1} other diagnostic(s)"
        super().__init__(text)
        self.text = text


@final
@frozen
class Expr:
    """An evaluated expression: its value (str, int, float, bool, None, list or dict), where it is,
    and whether it was an object constructor (``{...}``), which ``jobspec2`` treats apart."""

    value: Any
    range: Range
    object_cons: bool = False
    start: Range | None = None

    @property
    def start_range(self) -> Range:
        """hcl's ``StartRange``, where a value's diagnostics point: a plain string's text inside
        its quotes, else the whole expression."""
        return self.start if self.start is not None else self.range


@final
@frozen
class Attribute:
    """``name = expr``."""

    name: str
    expr: Expr
    name_range: Range


@final
@frozen
class Block:
    """``type "label" ... { body }``."""

    type: str
    labels: tuple[str, ...]
    body: Body
    type_range: Range
    label_ranges: tuple[Range, ...]
    open_brace_range: Range

    @property
    def def_range(self) -> Range:
        """hcl's ``DefRange``: from the type to its last label."""
        last = self.label_ranges[-1] if self.label_ranges else self.type_range
        return Range(self.type_range.filename, self.type_range.start, last.end)


@final
@frozen
class Body:
    """A file's or a block's content, attributes by name and blocks in order."""

    attributes: dict[str, Attribute]
    blocks: list[Block]
    src_range: Range

    @property
    def missing_item_range(self) -> Range:
        """Where hcl points at something the body lacks: its start."""
        return self.src_range.at_start()


@final
class _Deferred:
    """A value that names a variable or local not known yet (a first pass over the file)."""

    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED: Final = _Deferred()


def number(text: str) -> int | float:
    """A number literal's value: an int when whole, as ``smallestNumber`` keeps it."""
    value = Decimal(text)
    return int(value) if value == value.to_integral_value() else float(value)


def as_string(value: Any) -> str:
    """A value as a template (or an object key) includes it; HclError for one it cannot."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format(Decimal(repr(value)).normalize(), "f")
    if value is None:
        raise HclError(
            [
                Diagnostic(
                    "Invalid template interpolation value",
                    "The expression result is null. Cannot include a null value in a string template.",
                )
            ]
        )
    raise HclError(
        [
            Diagnostic(
                "Invalid template interpolation value",
                "Cannot include the given value in a string template: string required.",
            )
        ]
    )


def joined(parts: list[Any]) -> Any:
    """Literal texts and interpolations, alternating: one interpolation alone keeps its value."""
    if len(parts) == 3 and parts[0] == "" and parts[2] == "":
        return parts[1].value
    if any(part.value is DEFERRED for part in parts[1::2]):
        return DEFERRED
    out = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            out.append(part)
            continue
        try:
            out.append(as_string(part.value))
        except HclError as error:
            diagnostic = error.diagnostics[0]
            raise HclError([Diagnostic(diagnostic.summary, diagnostic.detail, part.range)]) from None
    return "".join(out)


def to_string(value: Any) -> str:
    """cty's conversion to a string (a number as hcl writes it); ValueError with cty's text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format(Decimal(repr(value)).normalize(), "f")
    raise ValueError("string required")


def to_bool(value: Any) -> bool:
    """cty's conversion to a bool ("true", "false", "1", "0" from a string)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value in ("true", "1"):
            return True
        if value in ("false", "0"):
            return False
        raise ValueError("a bool is required")
    raise ValueError("bool required")


def to_number(value: Any) -> int | float:
    """cty's conversion to a number (from a string that reads as one)."""
    if isinstance(value, bool | list | dict):
        raise ValueError("number required")
    if isinstance(value, int | float):
        return value
    try:
        number = Decimal(value.strip())
    except InvalidOperation:
        raise ValueError("a number is required") from None
    if not number.is_finite():
        raise ValueError("a number is required")
    return int(number) if number == number.to_integral_value() else float(number)
