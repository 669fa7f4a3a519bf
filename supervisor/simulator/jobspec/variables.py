"""A jobspec's input variables and locals, as Nomad 1.10.5's ``jobspec2`` evaluates them
(``types.variables.go``, ``types.config.go``), and the file read again in their scope.

- ``variable "name" { default = ..., type = ..., description = ... }`` and ``variables { name =
  default }`` declare variables; the request's ``Variables`` (a var file's content, ``name =
  value``) sets them. A declared variable with neither is ``Unset variable``; a value for one no
  block declares is only a warning where the agent parses (not strict), so it is dropped. A
  ``variable`` block in the var file is an error, as Nomad says.
- ``type`` converts the value where it is ``string``, ``number`` or ``bool``; a collection or
  object type constraint is kept, not checked. ``validation`` blocks are not read (a 400 says so).
- ``locals { name = expr }`` may use variables and other locals, in any order: the file is read
  again until every local that can be evaluated is, then once more with all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .content import Checker
from .hcl import parse_config
from .tree import DEFERRED, Attribute, Body, Diagnostic, HclError, to_bool, to_number, to_string

__all__ = ["resolved_body"]

_CONVERSIONS: Final[dict[str, Callable[[Any], Any]]] = {
    "string": to_string,
    "number": to_number,
    "bool": to_bool,
}
_UNSET_DETAIL: Final = (
    "A used variable must be set or have a default value; see "
    "https://developer.hashicorp.com/nomad/docs/job-specification/hcl2/variables for details."
)
_ROUNDS: Final = 100


def _deferred(value: Any) -> bool:
    if value is DEFERRED:
        return True
    if isinstance(value, list):
        return any(_deferred(item) for item in value)
    if isinstance(value, dict):
        return any(_deferred(item) for item in value.values())
    return False


class _Variables(Checker):
    def __init__(self) -> None:
        super().__init__()
        self.types: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        self.unset: list[str] = []

    def declare(self, body: Body) -> None:
        """Every ``variable`` and ``variables`` block of the file's first reading."""
        for block in body.blocks:
            if block.type == "variable" and self.labels_fit(block, ["name"]):
                name = block.labels[0]
                self.unsupported(
                    block.body,
                    attributes=["description", "default", "type"],
                    blocks=[],
                    unread=["validation"],
                )
                if name in self.types or name in self.values:
                    self.problem("Duplicate variable", f"Duplicate {name} variable definition found.", None)
                    continue
                kind = block.body.attributes.get("type")
                self.types[name] = kind.expr.value if kind is not None else ""
                default = block.body.attributes.get("default")
                if default is None:
                    self.unset.append(name)
                else:
                    self.set(name, default, "Invalid default value for variable", "This default value is")
            elif block.type == "variables":
                for nested in block.body.blocks:
                    self.problem(
                        f'Unexpected "{nested.type}" block', "Blocks are not allowed here.", nested.type_range
                    )
                for name, attribute in block.body.attributes.items():
                    if name in self.types:
                        self.problem(
                            "Duplicate variable",
                            f"Duplicate {name} variable definition found.",
                            attribute.name_range,
                        )
                        continue
                    self.types[name] = ""
                    self.set(name, attribute, "", "")

    def set(self, name: str, attribute: Attribute, summary: str, phrase: str) -> None:
        """The variable's value, converted to its type if it is a primitive one."""
        value = attribute.expr.value
        if _deferred(value):
            self.problem("Variables not allowed", "Variables may not be used here.", attribute.expr.range)
            return
        convert = _CONVERSIONS.get(self.types.get(name, ""))
        if convert is not None and value is not None:
            try:
                value = convert(value)
            except ValueError as error:
                self.problem(
                    summary or "Invalid value for variable",
                    f"{phrase or f'The value for {name} is'} not compatible with the variable's type "
                    f"constraint: {error}.",
                    attribute.expr.start_range,
                )
                return
        self.values[name] = value
        if name in self.unset:
            self.unset.remove(name)

    def assign(self, var_file: Body) -> None:
        """The request's ``Variables``: values for declared variables."""
        declarations = [b for b in var_file.blocks if b.type == "variable"]
        for block in declarations:
            name = block.labels[0] if block.labels else ""
            self.problem(
                "Variable declaration in a .var file",
                "A .var file is used to assign values to variables that have already been declared in job "
                f'files, not to declare new variables. To declare variable "{name}", place this block in '
                f"one of your job files\n\nTo set a value for this variable in {block.type_range.filename}, "
                f"use the definition syntax instead:\n    {name} = <value>",
                block.type_range,
            )
        if declarations:
            return
        for block in var_file.blocks:
            self.problem(f'Unexpected "{block.type}" block', "Blocks are not allowed here.", block.type_range)
        for name, attribute in var_file.attributes.items():
            if name in self.types:
                self.set(name, attribute, "", "")

    def finish(self) -> None:
        for name in self.unset:
            self.problem(f'Unset variable "{name}"', _UNSET_DETAIL, None)


def _locals(body: Body) -> dict[str, Attribute]:
    found: dict[str, Attribute] = {}
    for block in body.blocks:
        if block.type == "locals":
            for name, attribute in block.body.attributes.items():
                if name in found:
                    raise HclError(
                        [
                            Diagnostic(
                                "Duplicate value in locals",
                                f"Duplicate {name} definition found.",
                                attribute.name_range,
                            )
                        ],
                        joined=True,
                    )
                found[name] = attribute
    return found


def resolved_body(source: str, filename: str, var_content: str = "") -> Body:
    """The jobspec's body with every ``var.x`` and ``local.x`` evaluated; HclError with Nomad's
    diagnostics for a variable it refuses."""
    first = parse_config(source, filename)
    if not any(b.type in ("variable", "variables", "locals") for b in first.blocks) and not var_content:
        return parse_config(source, filename, {"var": {}, "local": {}})
    variables = _Variables()
    variables.declare(first)
    if var_content:
        variables.assign(parse_config(var_content, filename, {"var": {}, "local": {}}))
    variables.finish()
    if variables.diagnostics:
        raise HclError(variables.diagnostics, joined=True)
    known: dict[str, Any] = {}
    for _ in range(_ROUNDS):
        body = parse_config(source, filename, {"var": variables.values, "local": known}, strict=False)
        found = {name: a.expr.value for name, a in _locals(body).items() if not _deferred(a.expr.value)}
        if found == known:
            break
        known = found
    return parse_config(source, filename, {"var": variables.values, "local": known})
