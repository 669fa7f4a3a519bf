"""Go's ``encoding/json`` scanner (``scanner.go``), state for state, for the text of a syntax error
in a request body as ``json.Decoder`` reports it: ``invalid character 'x' looking for beginning of
value``, ``invalid character '}' after object key``, …, or ``unexpected EOF`` when the input ends
inside the value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

__all__ = ["syntax_error"]

_BLANK: Final = " \t\r\n"

_OBJECT_KEY, _OBJECT_VALUE, _ARRAY_VALUE = range(3)


class _SyntaxError(Exception):
    pass


def _quote_char(char: str) -> str:
    """A character as Go's scanner names it in an error: 'x', '\\n', '\\x00', '\\''."""
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    escapes = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    if char in escapes:
        return f"'{escapes[char]}'"
    code = ord(char)
    if code >= 0x80:
        # Go's scanner reads bytes: it names the first byte of the character.
        code = char.encode("utf-8", "surrogatepass")[0]
        char = chr(code)
    if code < 0x20 or code == 0x7F:
        return f"'\\x{code:02x}'"
    if 0x80 <= code < 0xA0 or code in (0xA0, 0xAD):
        return f"'\\u{code:04x}'"
    return f"'{char}'"


class _Scanner:
    """Go's ``encoding/json`` scanner (``scanner.go``), state for state: only its errors matter."""

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.step: Callable[[str], None] = self.begin_value
        self.done = False

    def fail(self, char: str, context: str) -> None:
        raise _SyntaxError(f"invalid character {_quote_char(char)} {context}")

    def begin_value(self, c: str) -> None:
        if c in _BLANK:
            return
        simple = {'"': self.in_string, "-": self.neg, "0": self.zero, "t": self.literal("true", 1)}
        simple |= {"f": self.literal("false", 1), "n": self.literal("null", 1)}
        if c == "{":
            self.stack.append(_OBJECT_KEY)
            self.step = self.begin_key_or_empty
        elif c == "[":
            self.stack.append(_ARRAY_VALUE)
            self.step = self.begin_value_or_empty
        elif c in simple:
            self.step = simple[c]
        elif "1" <= c <= "9":
            self.step = self.digits
        else:
            self.fail(c, "looking for beginning of value")

    def begin_value_or_empty(self, c: str) -> None:
        if c in _BLANK:
            return
        if c == "]":
            self.end_value(c)
        else:
            self.begin_value(c)

    def begin_key_or_empty(self, c: str) -> None:
        if c in _BLANK:
            return
        if c == "}":
            self.stack[-1] = _OBJECT_VALUE
            self.end_value(c)
        else:
            self.begin_key(c)

    def begin_key(self, c: str) -> None:
        if c in _BLANK:
            return
        if c != '"':
            self.fail(c, "looking for beginning of object key string")
        self.step = self.in_string

    def end_value(self, c: str) -> None:
        if not self.stack:
            self.done = True
            return
        if c in _BLANK:
            self.step = self.end_value
            return
        top = self.stack[-1]
        if top == _OBJECT_KEY:
            if c != ":":
                self.fail(c, "after object key")
            self.stack[-1], self.step = _OBJECT_VALUE, self.begin_value
        elif top == _OBJECT_VALUE:
            self.after_member(c, ",", "}", _OBJECT_KEY, self.begin_key, "after object key:value pair")
        else:
            self.after_member(c, ",", "]", _ARRAY_VALUE, self.begin_value, "after array element")

    def after_member(
        self, c: str, comma: str, close: str, then: int, step: Callable[[str], None], context: str
    ) -> None:
        if c == comma:
            self.stack[-1], self.step = then, step
        elif c == close:
            self.stack.pop()
            self.step = self.end_value
            self.done = not self.stack
        else:
            self.fail(c, context)

    def in_string(self, c: str) -> None:
        if c == '"':
            self.step = self.end_value
        elif c == "\\":
            self.step = self.in_escape
        elif ord(c) < 0x20:
            self.fail(c, "in string literal")

    def in_escape(self, c: str) -> None:
        if c in 'bfnrt\\/"':
            self.step = self.in_string
        elif c == "u":
            self.step = self.hex_digit(4)
        else:
            self.fail(c, "in string escape code")

    def hex_digit(self, left: int) -> Callable[[str], None]:
        def step(c: str) -> None:
            if c not in "0123456789abcdefABCDEF":
                self.fail(c, "in \\u hexadecimal character escape")
            self.step = self.in_string if left == 1 else self.hex_digit(left - 1)

        return step

    def neg(self, c: str) -> None:
        if c == "0":
            self.step = self.zero
        elif "1" <= c <= "9":
            self.step = self.digits
        else:
            self.fail(c, "in numeric literal")

    def digits(self, c: str) -> None:
        if not "0" <= c <= "9":
            self.zero(c)

    def zero(self, c: str) -> None:
        if c == ".":
            self.step = self.dot
        elif c in "eE":
            self.step = self.exponent
        else:
            self.end_value(c)

    def dot(self, c: str) -> None:
        if not "0" <= c <= "9":
            self.fail(c, "after decimal point in numeric literal")
        self.step = self.fraction

    def fraction(self, c: str) -> None:
        if c in "eE":
            self.step = self.exponent
        elif not "0" <= c <= "9":
            self.end_value(c)

    def exponent(self, c: str) -> None:
        if c in "+-":
            self.step = self.exponent_sign
        else:
            self.exponent_sign(c)

    def exponent_sign(self, c: str) -> None:
        if not "0" <= c <= "9":
            self.fail(c, "in exponent of numeric literal")
        self.step = self.exponent_digits

    def exponent_digits(self, c: str) -> None:
        if not "0" <= c <= "9":
            self.end_value(c)

    def literal(self, word: str, at: int) -> Callable[[str], None]:
        def step(c: str) -> None:
            if c != word[at]:
                self.fail(c, f"in literal {word} (expecting {_quote_char(word[at])})")
            self.step = self.end_value if at + 1 == len(word) else self.literal(word, at + 1)

        return step


def syntax_error(text: str) -> str | None:
    """What Go's ``json.Decoder`` says of the first value in ``text``: the scanner's error,
    ``unexpected EOF`` when the value is cut short, None when it is whole (what follows it is
    never read)."""
    scanner = _Scanner()
    try:
        for char in text:
            scanner.step(char)
            if scanner.done:
                return None
    except _SyntaxError as error:
        return str(error)
    try:
        scanner.step(" ")  # the end of the input ends a number or a literal
    except _SyntaxError:
        return "unexpected EOF"
    return None if scanner.done else "unexpected EOF"
