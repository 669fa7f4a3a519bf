"""Nomad's ``?filter=`` expressions on list endpoints (go-bexpr), for the part the daemon uses.

Nomad evaluates the expression against each full object (an ``Allocation``, not its list stub) and
answers errors as plain-text 400s:

- an expression that does not parse: ``failed to create result paginator: failed to read filter
  expression: <parser error>``, the parser's error as go-bexpr's pigeon parser writes it: ``line:column
  (offset): no match found, expected: …`` (the list of what was expected is this parser's, not
  always pigeon's), or a rule's own error ``1:8 (7): rule grouping: Unmatched parentheses``;
- a selector that names no field: ``failed to read result page: error finding value in datum:
  /Field at part 0: couldn't find struct field with name "Field"`` (only once an object is
  evaluated, so an empty list answers 200).

Supported here: selectors that name a top-level field of the object, ``==`` and ``!=`` against a
quoted string, a number or a bare word, ``and``, ``or``, ``not`` and parentheses. go-bexpr's other
operators (``in``, ``contains``, ``matches``, ``is empty``) and nested selectors are answered with a
400 that says the simulated cluster does not support them, rather than evaluated wrongly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import orjson

from .errors import NomadError

__all__ = ["ALLOC_FIELDS", "JOB_FIELDS", "NODE_FIELDS", "Getter", "Predicate", "compile_filter"]

Predicate = Callable[[Any], bool]
Getter = Callable[[Any], object]

ALLOC_FIELDS: Final[Mapping[str, Getter]] = {
    "ID": lambda a: a.id,
    "Namespace": lambda a: a.namespace,
    "EvalID": lambda a: a.eval_id,
    "Name": lambda a: a.name,
    "NodeID": lambda a: a.node_id,
    "NodeName": lambda a: a.node_name,
    "JobID": lambda a: a.job_id,
    "TaskGroup": lambda a: a.task_group,
    "DesiredStatus": lambda a: a.desired_status,
    "DesiredDescription": lambda a: a.desired_description,
    "ClientStatus": lambda a: a.client_status,
    "ClientDescription": lambda a: a.client_description,
    "PreviousAllocation": lambda a: a.previous_allocation,
    "NextAllocation": lambda a: a.next_allocation,
    "FollowupEvalID": lambda a: a.followup_eval_id,
    "CreateIndex": lambda a: a.create_index,
    "ModifyIndex": lambda a: a.modify_index,
    "AllocModifyIndex": lambda a: a.alloc_modify_index,
}
JOB_FIELDS: Final[Mapping[str, Getter]] = {
    "ID": lambda j: j.id,
    "Name": lambda j: j.spec.get("Name") or j.id,
    "Namespace": lambda j: j.namespace,
    "Type": lambda j: j.type,
    "Status": lambda j: j.status,
    "Stop": lambda j: j.stop,
    "Version": lambda j: j.version,
    "CreateIndex": lambda j: j.create_index,
    "ModifyIndex": lambda j: j.modify_index,
}
NODE_FIELDS: Final[Mapping[str, Getter]] = {
    "ID": lambda n: n.id,
    "Name": lambda n: n.name,
    "Datacenter": lambda n: n.datacenter,
    "Status": lambda n: n.status,
    "SchedulingEligibility": lambda n: n.eligibility,
    "Drain": lambda n: n.drain_strategy is not None,
    "CreateIndex": lambda n: n.create_index,
    "ModifyIndex": lambda n: n.modify_index,
}

_TOKEN: Final = re.compile(
    r"""\s*(?:
        (?P<lparen>\()|(?P<rparen>\))|(?P<op>==|!=)
        |(?P<string>"(?:[^"\\]|\\.)*"|`[^`]*`)
        |(?P<unterminated>"[^"]*$|`[^`]*$)
        |(?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?![a-zA-Z0-9_/.]))
        |(?P<word>[a-zA-Z][a-zA-Z0-9_/]*(?:\.[a-zA-Z0-9_/]+|\[[^\]]*\])*)
        |(?P<other>\S+)
    )""",
    re.VERBOSE,
)
_UNSUPPORTED_WORDS: Final = frozenset({"in", "contains", "matches", "is"})


_BAD_EXPRESSION: Final = "failed to create result paginator: failed to read filter expression: "


def _position(expression: str, offset: int) -> str:
    """Where pigeon's errors say they are: line and column (1-based, in characters), and the
    byte offset."""
    before = expression[:offset]
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    return f"{line}:{column} ({len(before.encode())})"


def _parse_error(expression: str, offset: int, detail: str) -> NomadError:
    where = _position(expression, offset)
    return NomadError(400, f"{_BAD_EXPRESSION}{where}: no match found, expected: {detail}")


def _rule_error(expression: str, offset: int, rule: str, message: str) -> NomadError:
    """An error the grammar's own code raises, named by its rule as pigeon names it."""
    return NomadError(400, f"{_BAD_EXPRESSION}{_position(expression, offset)}: rule {rule}: {message}")


def _unsupported(what: str) -> NomadError:
    return NomadError(400, f"{_BAD_EXPRESSION}the simulated cluster does not support {what}")


class _Parser:
    def __init__(self, expression: str, fields: Mapping[str, Getter]) -> None:
        self.expression = expression
        self.fields = fields
        self.tokens: list[tuple[str, str, int]] = []
        for match in _TOKEN.finditer(expression):
            kind = match.lastgroup
            if kind is not None:
                self.tokens.append((kind, match.group(kind), match.start(kind)))
        self.position = 0

    def _peek(self) -> tuple[str, str, int]:
        if self.position < len(self.tokens):
            return self.tokens[self.position]
        return ("end", "", len(self.expression))

    def _take(self) -> tuple[str, str, int]:
        token = self._peek()
        self.position += 1
        return token

    def parse(self) -> Predicate:
        predicate = self._or()
        kind, _, offset = self._peek()
        if kind != "end":
            raise _parse_error(self.expression, offset, '"and", "or" or end of input')
        return predicate

    def _or(self) -> Predicate:
        return self._chain("or", self._and, any)

    def _and(self) -> Predicate:
        return self._chain("and", self._not, all)

    def _chain(
        self, word: str, operand: Callable[[], Predicate], combine: Callable[[Iterable[bool]], bool]
    ) -> Predicate:
        """``operand (word operand)*``, left to right, short-circuiting as Go does."""
        operands = [operand()]
        while self._peek()[:2] == ("word", word):
            self._take()
            operands.append(operand())
        if len(operands) == 1:
            return operands[0]
        return lambda obj: combine(predicate(obj) for predicate in operands)

    def _not(self) -> Predicate:
        if self._peek()[:2] == ("word", "not"):
            self._take()
            inner = self._not()
            return lambda o: not inner(o)
        return self._primary()

    def _primary(self) -> Predicate:
        kind, text, offset = self._take()
        if kind == "lparen":
            inner = self._or()
            closing, _, closing_offset = self._take()
            if closing != "rparen":
                raise _rule_error(self.expression, closing_offset, "grouping", "Unmatched parentheses")
            return inner
        if kind in ("string", "number"):
            raise _unsupported(f"a value before its selector ({text} at {offset})")
        if kind != "word":
            raise _parse_error(self.expression, offset, '"(", "not" or a selector')
        selector = text
        op_kind, op, op_offset = self._take()
        if op_kind == "word" and op in _UNSUPPORTED_WORDS | {"not"}:
            raise _unsupported(f'the operator "{op}"')
        if op_kind != "op":
            raise _parse_error(self.expression, op_offset, '"!=", "." , "==", "[" or "is"')
        value_kind, value, value_offset = self._take()
        if value_kind == "unterminated":
            end = len(self.expression)
            raise _rule_error(self.expression, end, "string", "Unterminated string literal")
        if value_kind not in ("string", "number", "word"):
            raise _parse_error(self.expression, value_offset, "a value")
        return self._comparison(
            selector, op == "==", _literal(self.expression, value_kind, value, value_offset)
        )

    def _comparison(self, selector: str, equal: bool, value: str) -> Predicate:
        if "." in selector or "[" in selector:
            raise _unsupported(f'the nested selector "{selector}"')
        getter = self.fields.get(selector)

        def compare(obj: Any) -> bool:
            if getter is None:
                raise NomadError(
                    400,
                    "failed to read result page: error finding value in datum: "
                    f'/{selector} at part 0: couldn\'t find struct field with name "{selector}"',
                )
            field = getter(obj)
            matches = _render(field) == value
            return matches if equal else not matches

        return compare


def _literal(expression: str, kind: str, text: str, offset: int) -> str:
    if kind != "string":
        return text
    if text.startswith("`"):
        return text[1:-1]
    try:
        return str(orjson.loads(text))
    except orjson.JSONDecodeError:
        # go-bexpr unquotes with strconv.Unquote, whose error is "invalid syntax".
        raise _rule_error(expression, offset, "string", "invalid syntax") from None


def _render(value: object) -> str:
    """A field as go-bexpr compares it: the value is coerced to the field's kind."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def compile_filter(expression: str, fields: Mapping[str, Getter]) -> Predicate | None:
    """The predicate for ``expression`` (None for no filter); raises NomadError(400) as Nomad does."""
    if not expression.strip():
        return None
    return _Parser(expression, fields).parse()
