"""HCL2's native syntax as hashicorp/hcl v2.20 (``hclsyntax``) reads a jobspec: a tree of bodies,
attributes and blocks, with every attribute's expression evaluated as Nomad's ``jobspec2``
evaluates it.

Read: blocks with labels (quoted or bare), one-line blocks, attributes, comments (``#``, ``//``,
``/* */``), strings with escapes and ``${...}`` interpolation, heredocs (``<<EOF`` and ``<<-EOF``),
numbers, ``true``/``false``/``null``, tuples, objects (``=`` or ``:``, commas or newlines), and
references. As ``jobspec2``'s ``UndefinedVariable`` hook does, a reference whose root is not a
variable (``node.unique.name``, ``attr.x``, ``meta.x``, ``NOMAD_ALLOC_ID``) is kept as its own
source text in ``${...}``, for the client to interpolate; ``var`` and ``local`` are read in the
scope the caller gives (``variables.py``).

Not evaluated (a 400 that says so): function calls, operators, conditionals, ``for`` expressions,
template directives (``%{...}``) and splats.

Diagnostics read as hcl's ``Diagnostic.Error()``: ``input.hcl:3,5-9: Summary; Detail``. The parser
stops at the first syntax error, where hclsyntax recovers and counts the others
(``..., and 2 other diagnostic(s)``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .scanner import IDENT, NUMBER, UNEVALUATED, Scanner
from .tree import DEFERRED, Attribute, Block, Body, Diagnostic, Expr, HclError, Range, as_string, number

__all__ = ["parse_config"]

_OPERATORS: Final = "+-*/%<>=!&|?"


def parse_config(
    source: str,
    filename: str = "input.hcl",
    scope: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    strict: bool = True,
) -> Body:
    """The file's top-level body; HclError with hclsyntax's diagnostic for a syntax error.

    ``scope`` holds the values of ``var`` and ``local``; without it, or for a name it lacks when
    not ``strict``, a reference to them is ``DEFERRED`` (a first pass that collects the
    declarations). A variable block's ``type`` is kept as its source text."""
    return _Parser(source, filename, scope, strict).parse_file()


class _Parser(Scanner):
    """Bodies, blocks and expressions, evaluated in the scope of ``var`` and ``local``."""

    def __init__(
        self, source: str, filename: str, scope: Mapping[str, Mapping[str, Any]] | None, strict: bool
    ) -> None:
        super().__init__(source, filename)
        self.scope = scope
        self.strict = strict and scope is not None
        self.depth = 0

    # -- bodies ---------------------------------------------------------------------------------

    def parse_file(self) -> Body:
        body = self.parse_body(0, closing=None)
        return body

    def parse_body(self, start: int, closing: int | None, raw: frozenset[str] = frozenset()) -> Body:
        """Items up to the closing brace (``closing`` is the offset of the opening one) or the end."""
        attributes: dict[str, Attribute] = {}
        blocks: list[Block] = []
        while True:
            self.skip_blanks(newlines=True)
            here = self.i
            if here >= len(self.s):
                if closing is not None:
                    raise self.fail(
                        "Unclosed configuration block",
                        "There is no closing brace for this block before the end of the file. This may be "
                        "caused by incorrect brace nesting elsewhere in this file.",
                        closing,
                    )
                return Body(attributes, blocks, self.range(start, here))
            if self.peek() == "}" and closing is not None:
                self.i += 1
                return Body(attributes, blocks, self.range(start, self.i))
            name, name_start = self.ident()
            if not name:
                if self.peek() == '"':
                    raise self.fail("Invalid argument name", "Argument names must not be quoted.", here)
                raise self.fail(
                    "Argument or block definition required",
                    "An argument or block definition is required here.",
                    here,
                )
            name_range = self.range(name_start, self.i)
            self.skip_blanks()
            if self.peek() == "=" and not self.peek("=="):
                attribute = self.parse_attribute(name, name_range, raw)
                self.end_of_item(
                    "Missing newline after argument", "An argument definition must end with a newline."
                )
                if name in attributes:
                    raise HclError(
                        [
                            Diagnostic(
                                "Attribute redefined",
                                f'The argument "{name}" was already set at {attributes[name].name_range}. '
                                "Each argument may be set only once.",
                                name_range,
                            )
                        ]
                    )
                attributes[name] = attribute
            else:
                blocks.append(self.parse_block(name, name_range))
                self.end_of_item(
                    "Missing newline after block definition", "A block definition must end with a newline."
                )

    def end_of_item(self, summary: str, detail: str) -> None:
        self.skip_blanks()
        c = self.peek()
        if c not in ("", "\n"):
            if c == ",":
                summary, detail = (
                    "Unexpected comma after argument",
                    ("Argument definitions must be separated by newlines, not commas. " + detail),
                )
            word = IDENT.match(self.s, self.i) or NUMBER.match(self.s, self.i)
            raise self.fail(summary, detail, self.i, word.end() if word else None)

    def parse_attribute(self, name: str, name_range: Range, raw: frozenset[str] = frozenset()) -> Attribute:
        self.i += 1  # "="
        if name in raw:  # a type constraint: its text, up to the line's end or the block's brace
            self.skip_blanks()
            start, depth = self.i, 0
            while self.i < len(self.s) and self.s[self.i] != "\n":
                c = self.s[self.i]
                depth += (c in "([{") - (c in ")]}")
                if depth < 0:
                    break
                self.i += 1
            text = self.s[start : self.i].strip()
            return Attribute(name, Expr(text, self.range(start, start + len(text))), name_range)
        return Attribute(name, self.parse_expr(), name_range)

    def parse_block(self, block_type: str, type_range: Range) -> Block:
        labels: list[str] = []
        label_ranges: list[Range] = []
        while True:
            self.skip_blanks()
            here = self.i
            c = self.peek()
            if c == "{":
                break
            if c == '"':
                value = self.parse_template_string(labels=True)
            elif (label := self.ident()[0]) != "":
                value = label
            elif c == "=":
                raise self.fail(
                    "Invalid block definition",
                    'The equals sign "=" indicates an argument definition, and must not be used when '
                    "defining a block.",
                    here,
                )
            else:
                raise self.fail(
                    "Invalid block definition",
                    'Either a quoted string block label or an opening brace ("{") is expected here.',
                    here,
                )
            labels.append(value)
            label_ranges.append(self.range(here, self.i))
        open_brace = self.i
        self.i += 1
        self.skip_blanks()
        raw = frozenset({"type"}) if block_type == "variable" and self.depth == 0 else frozenset()
        if self.peek() in ("\n", "}", ""):
            self.depth += 1
            body = self.parse_body(open_brace, closing=open_brace, raw=raw)
            self.depth -= 1
        else:  # a one-line block: one argument, then the closing brace
            name, name_start = self.ident()
            name_range = self.range(name_start, self.i)
            self.skip_blanks()
            if not name or self.peek() != "=":
                raise self.fail(
                    "Argument or block definition required",
                    "An argument or block definition is required here.",
                    self.i,
                )
            attribute = self.parse_attribute(name, name_range, raw)
            self.skip_blanks()
            if self.peek() == ",":
                raise self.fail(
                    "Invalid single-argument block definition",
                    "Single-line block syntax can include only one argument definition. To define multiple "
                    "arguments, use the multi-line block syntax with one argument definition per line.",
                    self.i,
                )
            if self.peek() != "}":
                raise self.fail(
                    "Invalid single-argument block definition",
                    "An argument definition on the same line as its containing block creates a single-line "
                    "block definition, which must also be closed on the same line. Place the block's closing "
                    "brace immediately after the argument definition.",
                    self.i,
                )
            self.i += 1
            body = Body({name: attribute}, [], self.range(open_brace, self.i))
        return Block(
            block_type,
            tuple(labels),
            body,
            type_range,
            tuple(label_ranges),
            self.range(open_brace, open_brace + 1),
        )

    # -- expressions ----------------------------------------------------------------------------

    def parse_expr(self, *, newlines: bool = False) -> Expr:
        self.skip_blanks(newlines=newlines)
        expr = self.parse_primary(newlines)
        self.skip_blanks(newlines=newlines)
        c = self.peek()
        if c and c in _OPERATORS and not (c == "=" and not self.peek("==")):
            raise self.fail(*UNEVALUATED, self.i)
        if c == "[" or (c == "." and not self.peek("...")):
            raise self.fail(*UNEVALUATED, self.i)
        return expr

    def parse_primary(self, newlines: bool) -> Expr:
        start = self.i
        c = self.peek()
        if c == "":
            raise self.fail(
                "Missing expression",
                "Expected the start of an expression, but found the end of the file.",
                start,
            )
        if c == '"':
            value = self.parse_template_string()
            plain = "${" not in self.s[start : self.i]
            inside = self.range(start + 1, self.i - 1) if plain else None
            return Expr(value, self.range(start, self.i), start=inside)
        if self.peek("<<"):
            return Expr(self.parse_heredoc(), self.range(start, self.i))
        if c == "[":
            return Expr(self.parse_tuple(), self.range(start, self.i))
        if c == "{":
            return Expr(self.parse_object(), self.range(start, self.i), object_cons=True)
        if c == "(":
            self.i += 1
            inner = self.parse_expr(newlines=True)
            if self.peek() != ")":
                raise self.fail(
                    "Unbalanced parentheses",
                    "Expected a closing parenthesis to terminate the expression.",
                    self.i,
                )
            self.i += 1
            return Expr(inner.value, self.range(start, self.i))
        if c == "-" and (digits := NUMBER.match(self.s, self.i + 1)):
            self.i = digits.end()
            return Expr(-number(digits.group()), self.range(start, self.i))
        if digits := NUMBER.match(self.s, self.i):
            self.i = digits.end()
            return Expr(number(digits.group()), self.range(start, self.i))
        name, _ = self.ident()
        if not name:
            raise self.fail(
                "Invalid expression",
                "Expected the start of an expression, but found an invalid expression token.",
                start,
            )
        if name in ("true", "false", "null"):
            return Expr({"true": True, "false": False, "null": None}[name], self.range(start, self.i))
        if self.peek() == "(" or self.peek("::") or name == "for":
            raise self.fail(*UNEVALUATED, start)
        return Expr(self.parse_reference(name, start), self.range(start, self.i))

    def parse_reference(self, root: str, start: int) -> Any:
        """A reference: into ``var`` or ``local``, or one kept as its own text."""
        steps: list[tuple[Any, int]] = []
        while True:
            if self.peek() == "." and not self.peek(".."):
                self.i += 1
                step, _ = self.ident()
                if not step and (index := re.compile(r"[0-9]+").match(self.s, self.i)):
                    step, self.i = index.group(), index.end()
                if not step:
                    if self.peek() == "*":
                        raise self.fail(*UNEVALUATED, self.i)
                    raise self.fail(
                        "Invalid attribute name", "An attribute name is required after a dot.", self.i
                    )
                steps.append((step, self.i))
            elif self.peek() == "[":
                self.i += 1
                if self.peek() == "*":
                    raise self.fail(*UNEVALUATED, self.i)
                key = self.parse_expr(newlines=True).value
                if self.peek() != "]":
                    raise self.fail(
                        "Missing close bracket on index",
                        'The index operator must end with a closing bracket ("]").',
                        self.i,
                    )
                self.i += 1
                steps.append((key, self.i))
            else:
                break
        if root in ("var", "local"):
            return self.resolve(root, steps, start)
        return self.undefined_reference(start, self.i)

    def resolve(self, root: str, steps: list[tuple[Any, int]], start: int) -> Any:
        """``var.x...`` or ``local.x...`` in the scope, step by step."""
        if self.scope is None:
            return DEFERRED
        value: Any = self.scope.get(root, {})
        at = start + len(root)
        for key, end in steps:
            if value is DEFERRED or key is DEFERRED:
                return DEFERRED
            if isinstance(value, dict) and isinstance(key, str) and key in value:
                value = value[key]
            elif (
                isinstance(value, list) and not isinstance(key, bool) and _index(key, len(value)) is not None
            ):
                value = value[_index(key, len(value)) or 0]
            elif value is self.scope.get(root) and not self.strict:
                return DEFERRED
            elif isinstance(value, list):
                raise self.fail(
                    "Invalid index",
                    "The given key does not identify an element in this collection value.",
                    at,
                    end,
                )
            else:
                raise self.fail(
                    "Unsupported attribute", f'This object does not have an attribute named "{key}".', at, end
                )
            at = end
        return value

    def undefined_reference(self, start: int, end: int) -> str:
        """``jobspec2``'s ``UndefinedVariable``: the reference's text, with its enclosing ``${ }``."""
        s = self.s
        text = s[start:end]
        for i in range(start - 1, 0, -1):
            if s[i] == "{" and s[i - 1] == "$":
                text = s[i - 1 : start] + text
                for j in range(end + 1, len(s)):
                    if s[j] == "}":
                        text += s[end:j]
                    elif s[j] != " ":
                        return text + "}"
                return text
            if s[i] != " ":
                break
        return "${" + text + "}"

    def parse_tuple(self) -> list[Any]:
        open_at = self.i
        self.i += 1
        items: list[Any] = []
        while True:
            self.skip_blanks(newlines=True)
            if self.peek() == "]":
                self.i += 1
                return items
            if self.peek() == "":
                raise self.fail(
                    "Unterminated tuple constructor expression",
                    "There is no corresponding closing bracket before the end of the file. This may be "
                    "caused by incorrect bracket nesting elsewhere in this file.",
                    open_at,
                )
            items.append(self.parse_expr(newlines=True).value)
            self.skip_blanks(newlines=True)
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != "]":
                raise self.fail(
                    "Missing item separator",
                    "Expected a comma to mark the beginning of the next item.",
                    self.i,
                )

    def parse_object(self) -> Any:
        open_at = self.i
        self.i += 1
        items: dict[str, Any] = {}
        deferred = False
        while True:
            self.skip_blanks(newlines=True)
            if self.peek() == "}":
                self.i += 1
                return DEFERRED if deferred else items
            if self.peek() == "":
                raise self.fail(
                    "Unterminated object constructor expression",
                    "There is no corresponding closing brace before the end of the file. This may be caused "
                    "by incorrect brace nesting elsewhere in this file.",
                    open_at,
                )
            key_start = self.i
            name, _ = self.ident()
            if name and self.s[self.i : self.i + 1] in ("", " ", "\t", "=", ":", "\r"):
                key: Any = name  # a bare word is the key itself, not a reference
            else:
                self.i = key_start
                key = self.parse_primary(newlines=True).value
            self.skip_blanks()
            if self.peek() not in ("=", ":"):
                raise self.fail(
                    "Missing key/value separator",
                    'Expected an equals sign ("=") to mark the beginning of the attribute value.',
                    self.i,
                )
            self.i += 1
            value = self.parse_expr().value
            if key is DEFERRED:
                items.clear()  # a key not known yet: the object is not either
                deferred = True
            elif not deferred:
                items[as_string(key) if not isinstance(key, str) else key] = value
            self.skip_blanks()
            if self.peek() == ",":
                self.i += 1
            elif self.peek() not in ("\n", "}"):
                raise self.fail(
                    "Missing attribute separator",
                    "Expected a newline or comma to mark the beginning of the next attribute.",
                    self.i,
                )


def _index(key: Any, length: int) -> int | None:
    """A list's index from a number or a string of digits, if it is one of its elements."""
    if isinstance(key, str) and key.isdigit():
        key = int(key)
    if isinstance(key, int | float) and key == int(key) and 0 <= key < length:
        return int(key)
    return None
