"""The lowest part of reading HCL2's native syntax: where the reader is in the source, hcl's
diagnostics at a place, whitespace and comments, identifiers, and the quoted strings and heredocs
whose interpolations the parser above evaluates."""

from __future__ import annotations

import bisect
import re
from typing import Any, Final

from .tree import Diagnostic, Expr, HclError, Pos, Range, joined

__all__ = ["IDENT", "NUMBER", "UNEVALUATED", "Scanner"]

IDENT: Final = re.compile(r"[^\W\d][\w-]*")
NUMBER: Final = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_BLANKS: Final = " \t\r"
_ESCAPES: Final = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
UNEVALUATED: Final = (
    "Unsupported expression",
    "The simulated cluster evaluates literals, strings, heredocs, tuples, objects and references; "
    "not function calls, operators, conditionals, for expressions, splats or template directives.",
)


class Scanner:
    """A place in the source, and what reads the source's smallest parts from there."""

    def __init__(self, source: str, filename: str) -> None:
        self.s = source
        self.i = 0
        self.filename = filename
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def parse_expr(self, *, newlines: bool = False) -> Expr:
        """An expression, evaluated (the parser's; an interpolation reads one)."""
        raise NotImplementedError

    # -- positions and errors -------------------------------------------------------------------

    def pos(self, offset: int) -> Pos:
        """The line and column of an offset."""
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return Pos(line + 1, offset - self.line_starts[line] + 1, offset)

    def range(self, start: int, end: int) -> Range:
        """The range between two offsets."""
        return Range(self.filename, self.pos(start), self.pos(end))

    def fail(self, summary: str, detail: str, start: int, end: int | None = None) -> HclError:
        """The error to raise for a diagnostic at ``start`` (one character unless ``end``)."""
        end = start + (1 if start < len(self.s) else 0) if end is None else end
        return HclError([Diagnostic(summary, detail, self.range(start, end))])

    def peek(self, text: str = "") -> str:
        """The next character, or ``text`` if the source goes on with it (else "")."""
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
        """An identifier and where it starts ("" if there is none here)."""
        found = IDENT.match(self.s, self.i)
        if found is None:
            return "", self.i
        self.i = found.end()
        return found.group(), found.start()

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
                raise self.fail(*UNEVALUATED, self.i)
            else:
                literal.append(c)
                self.i += 1
        parts.append("".join(literal))
        return joined(parts)

    def escape(self) -> str:
        """A backslash escape in a quoted string."""
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
        """``${ expr }``: its expression, evaluated."""
        self.i += 2
        if self.peek() == "~":
            raise self.fail(*UNEVALUATED, self.i)
        expr = self.parse_expr(newlines=True)
        if self.peek() != "}":
            raise self.fail(*UNEVALUATED, self.i)
        self.i += 1
        return expr

    def parse_heredoc(self) -> Any:
        """``<<MARKER`` or ``<<-MARKER`` (its lines' common indent cut) up to the marker's line."""
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
                    raise self.fail(*UNEVALUATED, self.i)
                else:
                    literal.append(self.s[self.i])
                    self.i += 1
        self.i = after
        parts.append("".join(literal))
        return joined(parts)
