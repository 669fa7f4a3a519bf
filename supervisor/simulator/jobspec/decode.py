"""A jobspec's tree decoded into the ``api.Job`` Nomad 1.10.5's ``jobspec2`` makes of it
(``parse.go``, ``types.config.go``, ``hcl_conversions.go``, ``parse_job.go``), as JSON: every field of
every struct, null where HCL did not set a pointer.

What ``jobspec2`` does beyond gohcl's plain decoding, done here too:

- ``meta`` and ``env`` as a block or as an attribute (``meta = { ... }``), not both;
- a task's ``config`` as a free map: its nested blocks become lists of objects (a labelled block
  nests under its labels), and an attribute written as an object literal becomes a list of that
  one object, as ``hclutil.BlocksAsAttrs`` rewrites them;
- ``constraint`` and ``affinity`` with their shortcuts (``distinct_hosts``, ``regexp``, ``version``,
  ``semver``, ``set_contains``, ...) and the operator "=" by default;
- durations as Go duration strings or integer nanoseconds;
- ``normalizeJob``: the job's label as its ID and Name, a task at the job's level as its own
  group, and a ``port`` with a ``static`` value moved to the network's reserved ports;
- ``var`` and ``local`` read before any of this (``variables.py``).

Errors are hcl's diagnostics, every one found, one a line as ``jobspec2`` joins them. Where the
exact Go text could not be known (a value of a kind the target cannot take), it reads as cty's
conversion texts (``Unsuitable value: a number is required``) and the range is the value's.
"""

from __future__ import annotations

from typing import Any, Final

from ..http.query import parse_go_duration_ns
from .content import Checker
from .schema import AFFINITY, CONSTRAINT, JOB, TASK, TASK_GROUP, Field, Struct, zero
from .tree import (
    Attribute,
    Block,
    Body,
    Diagnostic,
    Expr,
    HclError,
    Pos,
    Range,
    to_bool,
    to_number,
    to_string,
)
from .variables import resolved_body

__all__ = ["parse_job"]

_TOP_BLOCKS: Final = ("variables", "variable", "locals", "job")
_INT_RANGES: Final = {"int": (-(2**63), 2**63 - 1), "*int8": (-128, 127), "uint8": (0, 255)}
_SHORTCUTS: Final = ("version", "semver", "regexp", "set_contains")
_CONSTRAINT_ARGS: Final = (
    "attribute", "value", "operator", "distinct_property", "distinct_hosts", "regexp", "version", "semver",
    "set_contains", "set_contains_all", "set_contains_any", "is_set", "is_not_set",
)  # fmt: skip
_AFFINITY_ARGS: Final = (
    "attribute", "value", "operator", "weight", "version", "semver", "regexp",
    "set_contains", "set_contains_all", "set_contains_any",
)  # fmt: skip


def parse_job(source: str, filename: str = "input.hcl", variables: str = "") -> dict[str, Any]:
    """The ``api.Job`` of an HCL2 jobspec, its variables set by ``variables`` (a var file's
    content); HclError with Nomad's diagnostics if it refuses it."""
    if source.lstrip(" ").startswith("{"):  # jobspec2's isJSON: HCL's JSON syntax
        raise HclError(
            [
                Diagnostic(
                    "Unsupported syntax",
                    "The simulated cluster reads HCL's native syntax, not its JSON syntax.",
                )
            ]
        )
    body = resolved_body(source, filename, variables)
    decoder = _Decoder()
    job = decoder.top(body)
    if decoder.diagnostics:
        raise HclError(decoder.diagnostics, joined=True)
    assert job is not None
    return job


def _attribute_range(attribute: Attribute) -> Range:
    return Range(attribute.name_range.filename, attribute.name_range.start, attribute.expr.range.end)


def _kind_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "tuple" if isinstance(value, list) else "object"


class _Decoder(Checker):
    # -- the file and the job -------------------------------------------------------------------

    def top(self, body: Body) -> dict[str, Any] | None:
        self.unsupported(body, attributes=[], blocks=_TOP_BLOCKS)
        jobs = [b for b in body.blocks if b.type == "job"]
        if not jobs:
            self.problem("Missing job block", "A job block is required", None)
            return None
        for extra in jobs[1:]:
            self.problem(
                "Duplicate job block",
                f'Only one block of type "job" is allowed. Previous definition was at {jobs[0].def_range}.',
                extra.def_range,
            )
        if not self.labels_fit(jobs[0], ["name"]) or self.diagnostics:
            return None
        return self.job(jobs[0])

    def job(self, block: Block) -> dict[str, Any]:
        body = block.body
        meta = self.map_attribute(body, "meta")
        tasks = [b for b in body.blocks if b.type == "task"]
        job = self.decode(
            body, JOB, skip_attributes={"meta"} if meta is not None else set(), skip_blocks={"task"}
        )
        if meta is not None:
            job["Meta"] = meta
        alone = []
        for task_block in tasks:
            if self.labels_fit(task_block, ["name"]):
                task = self.task(task_block)
                alone.append({**self.decode(_EMPTY, TASK_GROUP), "Name": task["Name"], "Tasks": [task]})
        self.normalize(job, block.labels[0], alone)
        return job

    def normalize(self, job: dict[str, Any], job_id: str, alone: list[dict[str, Any]]) -> None:
        """``normalizeJob``."""
        job["Name"] = job["Name"] if job["Name"] is not None else job_id
        job["ID"] = job["ID"] if job["ID"] is not None else job_id
        periodic = job["Periodic"]
        if periodic is not None and (periodic["Spec"] is not None or periodic["Specs"] is not None):
            periodic["SpecType"] = "cron"
        if alone:
            job["TaskGroups"] = alone + (job["TaskGroups"] or [])
        for group in job["TaskGroups"] or []:
            _move_static_ports(group["Networks"])
            for task in group["Tasks"] or []:
                if task["Resources"] is not None:
                    _move_static_ports(task["Resources"]["Networks"])

    def group(self, block: Block) -> dict[str, Any]:
        meta = self.map_attribute(block.body, "meta")
        group = self.decode(block.body, TASK_GROUP, skip_attributes={"meta"} if meta is not None else set())
        group["Name"] = block.labels[0]
        if meta is not None:
            group["Meta"] = meta
        return group

    def task(self, block: Block) -> dict[str, Any]:
        body = block.body
        env = self.map_attribute(body, "env")
        meta = self.map_attribute(body, "meta")
        skipped = {name for name, value in (("env", env), ("meta", meta)) if value is not None}
        task = self.decode(body, TASK, skip_attributes=skipped)
        task["Name"] = block.labels[0]
        if env is not None:
            task["Env"] = env
        if meta is not None:
            task["Meta"] = meta
        return task

    # -- gohcl's decoding of a body into a struct -----------------------------------------------

    def decode(
        self,
        body: Body,
        struct: Struct,
        *,
        skip_attributes: set[str] | frozenset[str] = frozenset(),
        skip_blocks: set[str] | frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        out = {f.json: zero(f) for f in struct.fields if not f.omitempty}
        self.unsupported(
            body,
            attributes=struct.attribute_names(),
            blocks=struct.block_names(),
            unread=struct.unread,
            skip_attributes=skip_attributes,
            skip_blocks=skip_blocks,
        )
        for name, attribute in body.attributes.items():
            if name not in skip_attributes and (f := struct.attribute(name)) is not None:
                out[f.json] = self.value(attribute.expr, f.kind)
        for f in struct.fields:
            if f.required and f.hcl not in body.attributes:
                self.problem(
                    "Missing required argument",
                    f'The argument "{f.hcl}" is required, but no definition was found.',
                    body.missing_item_range,
                )
        seen: dict[str, Block] = {}
        for block in body.blocks:
            f = struct.block(block.type)
            if f is None or block.type in skip_blocks:
                continue
            if f.kind != "blocks" and block.type in seen:
                self.problem(
                    f"Duplicate {block.type} block",
                    f"Only one {block.type} block is allowed. Another was defined at "
                    f"{seen[block.type].def_range}.",
                    block.def_range,
                )
                continue
            seen[block.type] = block
            decoded = self.block(block, f)
            if decoded is _UNFIT:
                continue
            if f.kind == "blocks":
                out[f.json] = [*(out[f.json] or []), decoded]
            else:
                out[f.json] = decoded
        return out

    def block(self, block: Block, f: Field) -> Any:
        if f.kind == "map":
            return self.map_block(block) if self.labels_fit(block, []) else _UNFIT
        if f.kind == "config":
            return _config_object(block.body) if self.labels_fit(block, []) else _UNFIT
        struct = f.struct
        assert struct is not None
        if not self.labels_fit(block, [label.hcl for label in struct.labels()]):
            return _UNFIT
        if struct is TASK_GROUP:
            return self.group(block)
        if struct is TASK:
            return self.task(block)
        if struct is CONSTRAINT:
            return self.constraint(block.body)
        if struct is AFFINITY:
            return self.affinity(block.body)
        decoded = self.decode(block.body, struct)
        for label, value in zip(struct.labels(), block.labels, strict=True):
            decoded[label.json] = value
        return decoded

    # -- maps, free maps and the values of attributes -------------------------------------------

    def map_attribute(self, body: Body, name: str) -> dict[str, str] | None:
        """``decodeAsAttribute``: ``name = { ... }`` as a map of strings, None if not written so."""
        attribute = body.attributes.get(name)
        if attribute is None:
            return None
        twin = next((b for b in body.blocks if b.type == name), None)
        if twin is not None:
            self.problem(
                f"Duplicate {name} block",
                f"{name} may not be defined more than once. Another definition is defined at "
                f"{_attribute_range(attribute)}.",
                twin.def_range,
            )
            return {}
        value = attribute.expr.value
        if not isinstance(value, dict):
            self.problem(
                "Unsuitable value type",
                "Unsuitable value: map of string required",
                attribute.expr.start_range,
            )
            return {}
        return {key: self.value(Expr(item, attribute.expr.range), "string") for key, item in value.items()}

    def map_block(self, block: Block) -> dict[str, str]:
        """A ``map[string]string`` block: its attributes as strings (a nested block cannot be one)."""
        out = {name: self.value(a.expr, "string") for name, a in block.body.attributes.items()}
        for nested in block.body.blocks:
            self.problem("Unsuitable value type", "Unsuitable value: string required", nested.type_range)
        return out

    def value(self, expr: Expr, kind: str) -> Any:
        """The attribute's value as its Go field's kind takes it."""
        value = expr.value
        base = kind.lstrip("*")
        if value is None:
            if base == "duration":
                self.problem("Unsuitable value", "Unsuitable duration value: nil", expr.start_range)
            elif not kind.startswith("*") and base != "[]string":
                self.problem(
                    "Unsuitable value type", "Unsuitable value: null value is not allowed", expr.start_range
                )
            return None
        try:
            if base == "duration":
                return self.duration(expr)
            if base == "string":
                return to_string(value)
            if base == "bool":
                return to_bool(value)
            if base == "[]string":
                if not isinstance(value, list):
                    raise ValueError("list of string required")
                return [to_string(item) for item in value]
            return _to_int(value, kind)
        except ValueError as error:
            self.problem("Unsuitable value type", f"Unsuitable value: {error}", expr.start_range)
            return None

    def duration(self, expr: Expr) -> int | None:
        """``decodeDuration``: a Go duration string, or a number of nanoseconds."""
        value = expr.value
        if isinstance(value, str):
            try:
                return parse_go_duration_ns(value)
            except ValueError as error:
                self.problem("Unsuitable value type", f"Unsuitable duration value: {error}", expr.start_range)
                return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            detail = f"Unsuitable value: expected a string but found {_kind_name(value)}"
            self.problem("Unsuitable value type", detail, expr.start_range)
            return None
        return _to_int(value, "int")

    # -- constraint and affinity (hcldec specs, then jobspec2's shortcuts) ----------------------

    def spec_values(self, body: Body, arguments: tuple[str, ...], types: dict[str, str]) -> dict[str, Any]:
        self.unsupported(body, attributes=sorted(arguments), blocks=[])
        values: dict[str, Any] = {}
        for name, attribute in body.attributes.items():
            if name not in arguments or attribute.expr.value is None:
                continue
            want = types.get(name, "string")
            try:
                value = attribute.expr.value
                values[name] = {"string": to_string, "bool": to_bool, "number": to_number}[want](value)
            except ValueError:
                self.problem(
                    "Incorrect attribute value type",
                    f'Inappropriate value for attribute "{name}": {want} required.',
                    attribute.expr.start_range,
                )
        return values

    def constraint(self, body: Body) -> dict[str, Any]:
        """``decodeConstraint``."""
        given = self.spec_values(body, _CONSTRAINT_ARGS, {"distinct_hosts": "bool"})
        out = {
            "LTarget": given.get("attribute", ""),
            "RTarget": given.get("value", ""),
            "Operand": given.get("operator", ""),
        }
        for shortcut in _SHORTCUTS:
            if given.get(shortcut):
                out["Operand"], out["RTarget"] = shortcut, given[shortcut]
        if "distinct_hosts" in given:
            out["Operand"], out["RTarget"] = "distinct_hosts", "true" if given["distinct_hosts"] else "false"
        if given.get("distinct_property"):
            out["Operand"], out["LTarget"] = "distinct_property", given["distinct_property"]
        out["Operand"] = out["Operand"] or "="
        return out

    def affinity(self, body: Body) -> dict[str, Any]:
        """``decodeAffinity``: its weight cut to an int8 as Go converts it."""
        given = self.spec_values(body, _AFFINITY_ARGS, {"weight": "number"})
        out = {
            "LTarget": given.get("attribute", ""),
            "RTarget": given.get("value", ""),
            "Operand": given.get("operator", ""),
            "Weight": None if "weight" not in given else (int(given["weight"]) + 128) % 256 - 128,
        }
        for shortcut in (
            "version",
            "semver",
            "regexp",
            "set_contains_any",
            "set_contains_all",
            "set_contains",
        ):
            if given.get(shortcut):
                out["Operand"], out["RTarget"] = shortcut, given[shortcut]
        out["Operand"] = out["Operand"] or "="
        return out


_UNFIT: Final = object()
_EMPTY: Final = Body({}, [], Range("", Pos(1, 1, 0), Pos(1, 1, 0)))


def _move_static_ports(networks: list[dict[str, Any]] | None) -> None:
    """``normalizeNetworkPorts``: a ``port`` with a static value is a reserved port."""
    for network in networks or []:
        ports = network["DynamicPorts"] or []
        if not ports:
            continue
        network["DynamicPorts"] = [p for p in ports if p["Value"] <= 0] or None
        network["ReservedPorts"] = [p for p in ports if p["Value"] > 0] or None


def _config_value(expr: Expr) -> Any:
    return [expr.value] if expr.object_cons else expr.value


def _config_object(body: Body) -> dict[str, Any]:
    """A driver's ``config``, or a block inside it, as ``BlocksAsAttrs`` reads it."""
    out: dict[str, Any] = {name: _config_value(a.expr) for name, a in body.attributes.items()}
    for block in body.blocks:
        item: dict[str, Any] = _config_object(block.body)
        for label in reversed(block.labels):
            item = {label: [item]}
        out.setdefault(block.type, []).append(item)
    return out


def _to_int(value: Any, kind: str) -> int:
    number = to_number(value)
    low, high = _INT_RANGES.get(kind, _INT_RANGES["int"])
    if number != int(number) or not low <= number <= high:
        raise ValueError(f"value must be a whole number, between {low} and {high}")
    return int(number)
