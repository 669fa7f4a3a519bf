"""Job and task group constraints, checked as Nomad's feasibility checker does for one node.

The left side is a node's value (``${node.unique.id}``, ``${node.unique.name}``,
``${node.datacenter}``, ``${attr.<name>}``) or a literal; the right side a literal. Nomad knows more
operands than this simulator checks (it checks equality, ``is_set`` and ``semver`` with comparison
operators); a job that uses another one is refused at registration, with the constraint named,
rather than placed as if it were not there; so is one whose target names a node value the simulator
does not hold (``${node.class}``, ``${meta.*}``, ...).

At registration Nomad adds constraints of its own (``jobImplicitConstraints``): a group with a
``bridge`` network needs the CNI reference plugins Nomad's bridge is made of, at version 0.4.0 or
later (``${attr.plugins.cni.version.bridge} semver >= 0.4.0``, and firewall, host-local, loopback,
portmap), unless the group already constrains that attribute.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from ..state.objects import SimNode

__all__ = ["add_implicit_constraints", "constraint_problems", "job_constraints", "satisfies"]

_EQUAL: Final = frozenset({"=", "==", "is"})
_NOT_EQUAL: Final = frozenset({"!=", "not"})
_SET: Final = frozenset({"is_set", "is_not_set"})
_SEMVER: Final = "semver"
_VERSION_TERM: Final = re.compile(r"\s*(>=|<=|!=|=|>|<)?\s*v?(\d+(?:\.\d+){0,2})\s*")
_VERSION: Final = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_CNI_MIN_VERSION: Final = ">= 0.4.0"
_BRIDGE_PLUGINS: Final = ("bridge", "firewall", "host-local", "loopback", "portmap")
# The node's values a target may name, by the SimNode field that holds them.
_NODE_TARGETS: Final = {"node.unique.id": "id", "node.unique.name": "name", "node.datacenter": "datacenter"}
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


def add_implicit_constraints(spec: dict[str, Any]) -> None:
    """Add to the canonical job the constraints Nomad's server adds at registration."""
    for group in spec.get("TaskGroups") or []:
        modes = {str(n.get("Mode") or "host") for n in group.get("Networks") or []}
        if "bridge" not in modes:
            continue
        constraints = group["Constraints"] = list(group.get("Constraints") or [])
        for plugin in _BRIDGE_PLUGINS:
            target = f"${{attr.plugins.cni.version.{plugin}}}"
            if not any(c.get("LTarget") == target for c in constraints):
                constraints.append({"LTarget": target, "Operand": _SEMVER, "RTarget": _CNI_MIN_VERSION})


def job_constraints(spec: dict[str, Any], group: dict[str, Any]) -> list[dict[str, Any]]:
    """The constraints that bind a group's allocations: the job's, the group's and its tasks'."""
    constraints = list(spec.get("Constraints") or []) + list(group.get("Constraints") or [])
    for task in group.get("Tasks") or []:
        constraints += task.get("Constraints") or []
    return constraints


def constraint_problems(spec: dict[str, Any]) -> list[str]:
    """What registration refuses in a job's constraints, at every level (Nomad answers 500, as for
    its other validation errors)."""
    lists = [spec.get("Constraints")]
    groups = spec.get("TaskGroups")
    for group in groups if isinstance(groups, list) else []:
        if isinstance(group, dict):
            lists.append(group.get("Constraints"))
            tasks = group.get("Tasks")
            lists += (
                [t.get("Constraints") for t in tasks if isinstance(t, dict)]
                if isinstance(tasks, list)
                else []
            )
    problems = []
    for constraints in lists:
        if constraints is not None and not isinstance(constraints, list):
            problems.append("Constraints must be a list")
            continue
        problems += [p for c in constraints or [] if (p := _problem(c))]
    return problems


def _problem(constraint: Any) -> str:
    if not isinstance(constraint, dict):
        return "Constraint must be an object"
    operand = constraint.get("Operand")
    if not operand:
        return "Missing constraint operand"
    if operand not in _NOMAD_OPERANDS:
        return f'Unknown constraint type "{operand}"'
    if operand == _SEMVER and _version_terms(str(constraint.get("RTarget") or "")) is None:
        return f'Constraint "semver {constraint.get("RTarget")}" is not simulated'
    if operand not in _EQUAL | _NOT_EQUAL | _SET | {_SEMVER}:
        return f'Constraint operand "{operand}" is not simulated'
    for side in ("LTarget", "RTarget"):
        target = str(constraint.get(side) or "")
        if target.startswith("${") and not _simulated(target[2:-1]):
            return f'Constraint target "{target}" is not simulated'
    return ""


def _simulated(name: str) -> bool:
    return name in _NODE_TARGETS or name.startswith("attr.")


def satisfies(node: SimNode, constraints: Iterable[dict[str, Any]]) -> bool:
    """Whether the node meets every constraint."""
    return all(_meets(node, c) for c in constraints)


def _meets(node: SimNode, constraint: dict[str, Any]) -> bool:
    operand = str(constraint["Operand"])
    left = _resolve(node, str(constraint.get("LTarget") or ""))
    if operand in _SET:
        return (left is not None) == (operand == "is_set")
    right = _resolve(node, str(constraint.get("RTarget") or ""))
    if operand == _SEMVER:
        return left is not None and _version_meets(left, _version_terms(right or "") or [])
    if operand in _EQUAL:
        return left is not None and left == right
    return left != right  # as Nomad's: two targets the node lacks are equal


def _resolve(node: SimNode, target: str) -> str | None:
    """A target's value on the node, None where the node has none (a literal is itself)."""
    if not (target.startswith("${") and target.endswith("}")):
        return target
    name = target[2:-1]
    if name in _NODE_TARGETS:
        return str(getattr(node, _NODE_TARGETS[name]))
    if name.startswith("attr."):
        return node.attributes.get(name.removeprefix("attr."))
    return None


def _version(text: str) -> tuple[int, int, int] | None:
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        return None
    major, minor, patch = (int(part or 0) for part in match.groups())
    return major, minor, patch


def _version_terms(text: str) -> list[tuple[str, tuple[int, int, int]]] | None:
    """A version constraint's terms (">= 0.4.0, < 2"), None where a term is not a comparison."""
    terms = []
    for term in text.split(","):
        match = _VERSION_TERM.fullmatch(term)
        version = _version(match[2]) if match else None
        if match is None or version is None:
            return None
        terms.append((match[1] or "=", version))
    return terms


def _version_meets(value: str, terms: list[tuple[str, tuple[int, int, int]]]) -> bool:
    version = _version(value)
    if version is None:
        return False
    checks = {
        "=": lambda v: version == v,
        "!=": lambda v: version != v,
        ">": lambda v: version > v,
        "<": lambda v: version < v,
        ">=": lambda v: version >= v,
        "<=": lambda v: version <= v,
    }
    return all(checks[op](wanted) for op, wanted in terms)
