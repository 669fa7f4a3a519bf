"""Job and task group constraints, checked as Nomad's feasibility checker does for one node.

The left side is a node's value (``${node.unique.id}``, ``${node.unique.name}``,
``${node.datacenter}``, ``${attr.<name>}``) or a literal; the right side a literal. Nomad knows more
operands than this simulator checks; a job that uses another one is refused at registration, with
the constraint named, rather than placed as if it were not there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from .objects import SimNode

__all__ = ["constraint_problems", "job_constraints", "satisfies"]

_EQUAL: Final = frozenset({"=", "==", "is"})
_NOT_EQUAL: Final = frozenset({"!=", "not"})
_SET: Final = frozenset({"is_set", "is_not_set"})
# Every operand Nomad's Constraint.Validate accepts (structs.go).
_NOMAD_OPERANDS: Final = frozenset(
    {
        *_EQUAL,
        *_NOT_EQUAL,
        *_SET,
        "<",
        "<=",
        ">",
        ">=",
        "distinct_hosts",
        "distinct_property",
        "regexp",
        "version",
        "semver",
        "set_contains",
        "set_contains_all",
        "set_contains_any",
    }
)


def job_constraints(spec: dict[str, Any], group: dict[str, Any]) -> list[dict[str, Any]]:
    """The constraints that bind a group's allocations: the job's, the group's and its tasks'."""
    constraints = list(spec.get("Constraints") or []) + list(group.get("Constraints") or [])
    for task in group.get("Tasks") or []:
        constraints += task.get("Constraints") or []
    return constraints


def constraint_problems(constraints: Iterable[Any]) -> list[str]:
    """What registration refuses in these constraints (Nomad answers 500, like other validation)."""
    problems = []
    for constraint in constraints:
        operand = constraint.get("Operand", "=") if isinstance(constraint, dict) else None
        if operand is None:
            problems.append("Constraint must be an object")
        elif operand not in _NOMAD_OPERANDS:
            problems.append(f'Unknown constraint type "{operand}"')
        elif operand not in _EQUAL | _NOT_EQUAL | _SET:
            problems.append(f'Constraint operand "{operand}" is not simulated')
    return problems


def satisfies(node: SimNode, constraints: Iterable[dict[str, Any]]) -> bool:
    """Whether the node meets every constraint."""
    return all(_meets(node, c) for c in constraints)


def _meets(node: SimNode, constraint: dict[str, Any]) -> bool:
    operand = constraint.get("Operand") or "="
    left = _resolve(node, str(constraint.get("LTarget") or ""))
    if operand in _SET:
        return (left is not None) == (operand == "is_set")
    right = _resolve(node, str(constraint.get("RTarget") or ""))
    if operand in _EQUAL:
        return left is not None and left == right
    return left != right  # as Nomad's: two targets the node lacks are equal


def _resolve(node: SimNode, target: str) -> str | None:
    """A target's value on the node, None where the node has none (a literal is itself)."""
    if not (target.startswith("${") and target.endswith("}")):
        return target
    name = target[2:-1]
    values = {"node.unique.id": node.id, "node.unique.name": node.name, "node.datacenter": node.datacenter}
    if name in values:
        return values[name]
    if name.startswith("attr."):
        return node.attributes.get(name.removeprefix("attr."))
    return None
