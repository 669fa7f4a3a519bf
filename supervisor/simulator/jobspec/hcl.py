"""HCL2's native syntax as hashicorp/hcl v2.20 (``hclsyntax``) reads a jobspec: a tree of bodies,
attributes and blocks, with every attribute's expression evaluated as Nomad's ``jobspec2``
evaluates it.

Read: blocks with labels (quoted or bare), one-line blocks, attributes, comments (``#``, ``//``,
``/* */``), strings with escapes and ``${...}`` interpolation, heredocs (``<<EOF`` and ``<<-EOF``),
numbers, ``true``/``false``/``null``, tuples, objects (``=`` or ``:``, commas or newlines), and
references. As ``jobspec2``'s ``UndefinedVariable`` hook does, a reference whose root is not a
variable (``node.unique.name``, ``attr.x``, ``meta.x``, ``NOMAD_ALLOC_ID``) is kept as its own
source text in ``${...}``, for the client to interpolate. ``var`` and ``local`` are empty objects.

Not evaluated (a 400 that says so): function calls, operators, conditionals, ``for`` expressions,
template directives (``%{...}``) and splats.

Diagnostics read as hcl's ``Diagnostic.Error()``: ``input.hcl:3,5-9: Summary; Detail``. The parser
stops at the first syntax error, where hclsyntax recovers and counts the others
(``..., and 2 other diagnostic(s)``).
"""

from __future__ import annotations

import bisect
import re
from typing import Any, Final

from .tree import Attribute, Block, Body, Diagnostic, Expr, HclError, Pos, Range, as_string, joined, number

__all__ = ["parse_config"]

_IDENT: Final = re.compile(r"[^\W\d][\w-]*")
_NUMBER: Final = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_BLANKS: Final = " \t\r"
_ESCAPES: Final = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
_OPERATORS: Final = "+-*/%<>=!&|?"
_UNEVALUATED: Final = (
    "Unsupported expression",
    "The simulated cluster evaluates literals, strings, heredocs, tuples, objects and references; "
    "not function calls, operators, conditionals, for expressions, splats or template directives.",
)


def parse_config(source: str, filename: str = "input.hcl") -> Body:
    """The file's top-level body; HclError with hclsyntax's diagnostic for a syntax error."""
    return _Parser(source, filename).parse_file()


class _Parser:
    def __init__(self, source: str, filename: str) -> None:
        self.s = source
        self.i = 0
        self.filename = filename
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    # -- positions and errors -------------------------------------------------------------------

    def pos(self, offset: int) -> Pos:
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return Pos(line + 1, offset - self.line_starts[line] + 1, offset)

    def range(self, start: int, end: int) -> Range:
        return Range(self.filename, self.pos(start), self.pos(end))

    def fail(self, summary: str, detail: str, start: int, end: int | None = None) -> HclError:
        end = start + (1 if start < len(self.s) else 0) if end is None else end
        return HclError([Diagnostic(summary, detail, self.range(start, end))])

    def peek(self, text: str = "") -> str:
        if text:
            return text if self.s.startswith(text, self.i) else ""
        return self.s[self.i] if self.i < len(self.s) else ""

    # -- whitespace -----------------------------------------------------------------------------

    def skip_blanks(self, *, newlines: bool = False) -> None:
        """Spaces and comments; newlines too where the grammar ignores them (inside brackets)."""
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in _BLANKS or (newlines and c == "\n"):
                self.i += 1
            elif c == "#" or s.startswith("//", self.i):
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            elif s.startswith("/*", self.i):
                end = s.find("*/", self.i + 2)
                if end < 0:
                    raise self.fail(
                        "Unterminated template string", "No closing marker was found for the comment.", self.i
                    )
                self.i = end + 2
            else:
                return

    def ident(self) -> tuple[str, int]:
        found = _IDENT.match(self.s, self.i)
        if found is None:
            return "", self.i
        self.i = found.end()
        return found.group(), found.start()

    # -- bodies ---------------------------------------------------------------------------------

    def parse_file(self) -> Body:
        body = self.parse_body(0, closing=None)
        return body

    def parse_body(self, start: int, closing: int | None) -> Body:
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
                attribute = self.parse_attribute(name, name_range)
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
            word = _IDENT.match(self.s, self.i) or _NUMBER.match(self.s, self.i)
            raise self.fail(summary, detail, self.i, word.end() if word else None)

    def parse_attribute(self, name: str, name_range: Range) -> Attribute:
        self.i += 1  # "="
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
        if self.peek() in ("\n", "}", ""):
            body = self.parse_body(open_brace, closing=open_brace)
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
            attribute = self.parse_attribute(name, name_range)
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
            raise self.fail(*_UNEVALUATED, self.i)
        if c == "[" or (c == "." and not self.peek("...")):
            raise self.fail(*_UNEVALUATED, self.i)
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
        if c == "-" and (digits := _NUMBER.match(self.s, self.i + 1)):
            self.i = digits.end()
            return Expr(-number(digits.group()), self.range(start, self.i))
        if digits := _NUMBER.match(self.s, self.i):
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
            raise self.fail(*_UNEVALUATED, start)
        return Expr(self.parse_reference(name, start), self.range(start, self.i))

    def parse_reference(self, root: str, start: int) -> Any:
        """A reference: ``var.x`` and ``local.x`` (none are defined), or one kept as its own text."""
        steps: list[str] = []
        while True:
            if self.peek() == "." and not self.peek(".."):
                self.i += 1
                step, _ = self.ident()
                if not step and (index := re.compile(r"[0-9]+").match(self.s, self.i)):
                    step, self.i = index.group(), index.end()
                if not step:
                    if self.peek() == "*":
                        raise self.fail(*_UNEVALUATED, self.i)
                    raise self.fail(
                        "Invalid attribute name", "An attribute name is required after a dot.", self.i
                    )
                steps.append(step)
            elif self.peek() == "[":
                self.i += 1
                if self.peek() == "*":
                    raise self.fail(*_UNEVALUATED, self.i)
                self.parse_expr(newlines=True)
                if self.peek() != "]":
                    raise self.fail(
                        "Missing close bracket on index",
                        'The index operator must end with a closing bracket ("]").',
                        self.i,
                    )
                self.i += 1
                steps.append("[]")
            else:
                break
        if root in ("var", "local"):
            if not steps:
                return {}
            raise self.fail(
                "Unsupported attribute",
                f'This object does not have an attribute named "{steps[0]}".',
                start,
                self.i,
            )
        return self.undefined_reference(start, self.i)

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

    def parse_object(self) -> dict[str, Any]:
        open_at = self.i
        self.i += 1
        items: dict[str, Any] = {}
        while True:
            self.skip_blanks(newlines=True)
            if self.peek() == "}":
                self.i += 1
                return items
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
            items[as_string(key) if not isinstance(key, str) else key] = self.parse_expr().value
            self.skip_blanks()
            if self.peek() == ",":
                self.i += 1
            elif self.peek() not in ("\n", "}"):
                raise self.fail(
                    "Missing attribute separator",
                    "Expected a newline or comma to mark the beginning of the next attribute.",
                    self.i,
                )

    # -- strings --------------------------------------------------------------------------------

    def parse_template_string(self, *, labels: bool = False) -> Any:
        """A quoted string, its escapes and interpolations (one interpolation alone keeps its
        value's type, as hcl's template wrap does)."""
        open_at = self.i
        self.i += 1
        parts: list[Any] = []
        literal: list[str] = []
        s = self.s
        while True:
            if self.i >= len(s):
                raise self.fail(
                    "Unterminated string literal",
                    "Unable to find the closing quote mark before the end of the file.",
                    open_at,
                )
            c = s[self.i]
            if c == '"':
                self.i += 1
                break
            if c == "\n":
                raise self.fail(
                    "Invalid multi-line string",
                    "Quoted strings may not be split over multiple lines. To produce a multi-line string, "
                    'either use the \\n escape to represent a newline character or use the "heredoc" '
                    "multi-line template syntax.",
                    self.i,
                )
            if c == "\\":
                literal.append(self.escape())
            elif s.startswith(("$${", "%%{"), self.i):
                literal.append(s[self.i + 1 : self.i + 3])
                self.i += 3
            elif s.startswith("${", self.i):
                if labels:
                    raise self.fail(
                        "Invalid string literal", "Template sequences are not allowed in this string.", self.i
                    )
                parts.append("".join(literal))
                literal = []
                parts.append(self.interpolation())
            elif s.startswith("%{", self.i):
                raise self.fail(*_UNEVALUATED, self.i)
            else:
                literal.append(c)
                self.i += 1
        parts.append("".join(literal))
        return joined(parts)

    def escape(self) -> str:
        s, at = self.s, self.i
        selector = s[at + 1 : at + 2]
        if selector in _ESCAPES:
            self.i += 2
            return _ESCAPES[selector]
        if selector in ("u", "U"):
            width = 4 if selector == "u" else 8
            digits = s[at + 2 : at + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                word = "four" if width == 4 else "eight"
                raise self.fail(
                    "Invalid escape sequence",
                    f"The \\{selector} escape sequence must be followed by {word} hexadecimal digits.",
                    at,
                )
            self.i += 2 + width
            return chr(int(digits, 16))
        if not selector:
            raise self.fail(
                "Invalid escape sequence",
                "Backslash must be followed by an escape sequence selector character.",
                at,
            )
        raise self.fail(
            "Invalid escape sequence", f'The symbol "{selector}" is not a valid escape sequence selector.', at
        )

    def interpolation(self) -> Expr:
        self.i += 2
        if self.peek() == "~":
            raise self.fail(*_UNEVALUATED, self.i)
        expr = self.parse_expr(newlines=True)
        if self.peek() != "}":
            raise self.fail(*_UNEVALUATED, self.i)
        self.i += 1
        return expr

    def parse_heredoc(self) -> Any:
        start = self.i
        self.i += 2
        flush = self.peek() == "-"
        self.i += flush
        marker, _ = self.ident()
        self.i += self.peek("\r\n") != ""
        if not marker or self.peek() != "\n":
            raise self.fail(
                "Invalid expression",
                "Expected the start of an expression, but found an invalid expression token.",
                start,
            )
        self.i += 1
        lines: list[tuple[int, str]] = []
        while True:
            if self.i >= len(self.s):
                raise self.fail(
                    "Unterminated template string",
                    f"No closing marker was found for the string ({marker}).",
                    start,
                )
            end = self.s.find("\n", self.i)
            line = self.s[self.i : len(self.s) if end < 0 else end + 1]
            if line.strip(" \t\r\n") == marker:
                self.i += len(line.rstrip("\n"))
                break
            lines.append((self.i, line))
            self.i += len(line)
        if flush:
            indents = [len(line) - len(line.lstrip(" \t")) for _, line in lines if line.strip()]
            cut = min(indents, default=0)
            lines = [(at + min(cut, len(line) - 1), line[min(cut, len(line) - 1) :]) for at, line in lines]
        return self.heredoc_template(lines)

    def heredoc_template(self, lines: list[tuple[int, str]]) -> Any:
        """The heredoc's lines as a template: no escapes, but interpolations."""
        parts: list[Any] = []
        literal: list[str] = []
        after = self.i
        for at, line in lines:
            self.i = at
            stop = at + len(line)
            while self.i < stop:
                if self.s.startswith(("$${", "%%{"), self.i):
                    literal.append(self.s[self.i + 1 : self.i + 3])
                    self.i += 3
                elif self.s.startswith("${", self.i):
                    parts.append("".join(literal))
                    literal = []
                    parts.append(self.interpolation())
                elif self.s.startswith("%{", self.i):
                    raise self.fail(*_UNEVALUATED, self.i)
                else:
                    literal.append(self.s[self.i])
                    self.i += 1
        self.i = after
        parts.append("".join(literal))
        return joined(parts)
