"""Nomad's ACL policy rules: the HCL (or JSON) an operator applies, read into a ``Policy``, and a set
of policies compiled into an ``Acl`` that answers "may this token do that?" as Nomad's own ``acl``
package does (``acl/policy.go``, ``acl/acl.go``).

The rules language is HCL 1 restricted to what policies use: blocks with labels (``namespace
"default" { ... }``), attributes (``policy = "write"``), strings, lists, numbers, booleans and the three
comment styles; JSON rules have the same structure. As in Nomad:

- A namespace's ``policy`` (deny, read, write, scale) adds its capabilities to those listed; ``deny``
  anywhere for a namespace wins over every other policy's grants.
- ``variables { path "p/*" { capabilities = [...] } }`` grants read, write, list, destroy per path
  (``read`` implies ``list``); a path's capabilities from several policies add up.
- A name with ``*`` is a glob; a concrete name wins over globs, and of several matching globs the
  one closest in length to the name wins (on a tie, the last in key order, as Nomad's sort ends up).
- ``node``, ``agent`` and ``operator`` take a level (deny, read, write); the most privileged of all
  policies counts, ``deny`` first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, final

import orjson
from attrs import frozen

__all__ = [
    "NAMESPACE_CAPABILITIES",
    "VARIABLE_CAPABILITIES",
    "Acl",
    "NamespaceRule",
    "Policy",
    "PolicyError",
    "VariablesRule",
    "glob_matches",
    "parse_policy",
]


class PolicyError(ValueError):
    """Rules that Nomad would refuse to apply; the message says what is wrong, as Nomad's does."""


NAMESPACE_CAPABILITIES: Final = frozenset(
    {
        "deny",
        "list-jobs",
        "parse-job",
        "read-job",
        "submit-job",
        "dispatch-job",
        "read-logs",
        "read-fs",
        "alloc-exec",
        "alloc-node-exec",
        "alloc-lifecycle",
        "csi-register-plugin",
        "csi-write-volume",
        "csi-read-volume",
        "csi-list-volume",
        "csi-mount-volume",
        "host-volume-create",
        "host-volume-register",
        "host-volume-read",
        "host-volume-write",
        "host-volume-delete",
        "list-scaling-policies",
        "read-scaling-policy",
        "read-job-scaling",
        "scale-job",
        "submit-recommendation",
        "sentinel-override",
    }
)
VARIABLE_CAPABILITIES: Final = frozenset({"read", "write", "list", "destroy", "deny"})
_LEVELS: Final = ("deny", "read", "write")
_NAMESPACE_POLICIES: Final = ("deny", "read", "write", "scale")
_READ: Final = (
    "list-jobs",
    "parse-job",
    "read-job",
    "csi-list-volume",
    "csi-read-volume",
    "read-job-scaling",
    "list-scaling-policies",
    "read-scaling-policy",
    "host-volume-read",
)
_WRITE: Final = (
    *_READ,
    "scale-job",
    "submit-job",
    "dispatch-job",
    "read-logs",
    "read-fs",
    "alloc-exec",
    "alloc-lifecycle",
    "csi-mount-volume",
    "csi-write-volume",
    "submit-recommendation",
    "host-volume-create",
)
_EXPANDED: Final[Mapping[str, tuple[str, ...]]] = {
    "deny": ("deny",),
    "read": _READ,
    "write": _WRITE,
    "scale": (
        "list-scaling-policies",
        "read-scaling-policy",
        "read-job-scaling",
        "scale-job",
        "read-job",
        "submit-recommendation",
    ),
}
_IMPLIED: Final[Mapping[str, tuple[str, ...]]] = {
    "host-volume-write": (
        "host-volume-register",
        "host-volume-create",
        "host-volume-delete",
        "host-volume-read",
    ),
    "host-volume-register": ("host-volume-create", "host-volume-read"),
    "host-volume-create": ("host-volume-read",),
}
_LEVEL_BLOCKS: Final = ("agent", "node", "operator", "quota", "plugin")
_LABELLED_BLOCKS: Final = ("namespace", "node_pool", "host_volume")
_VALID_NAMES: Final = {
    "namespace": re.compile(r"^[a-zA-Z0-9*-]{1,128}$"),
    "node_pool": re.compile(r"^[a-zA-Z0-9*_-]{1,128}$"),
    "host_volume": re.compile(r"^[a-zA-Z0-9*-]{1,128}$"),
}


# -- reading HCL ---------------------------------------------------------------------------------


@frozen
class _Item:
    """``key label... { body }`` (value: the body's items) or ``key = value``."""

    key: str
    labels: tuple[str, ...]
    value: Any


_TOKEN: Final = re.compile(
    r"""(?P<space>\s+|\#[^\n]*|//[^\n]*|/\*.*?\*/)
      |(?P<string>"(?:[^"\\\n]|\\.)*")
      |(?P<number>-?\d+(?:\.\d+)?)
      |(?P<word>[A-Za-z_][\w.-]*)
      |(?P<punct>[{}\[\]=,:])""",
    re.VERBOSE | re.DOTALL,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            line = text.count("\n", 0, position) + 1
            raise PolicyError(f"Failed to parse ACL Policy: line {line}: unexpected {text[position]!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append((kind, match.group()))
        position = match.end()
    return tokens


class _Reader:
    """A recursive descent over the tokens of HCL 1's object syntax."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.position = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.position] if self.position < len(self.tokens) else ("end", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        self.position += 1
        return token

    def body(self, closing: str) -> tuple[_Item, ...]:
        items: list[_Item] = []
        while True:
            kind, text = self.peek()
            if text == closing and kind in ("punct", "end"):
                self.take()
                return tuple(items)
            if kind == "end":
                raise PolicyError("Failed to parse ACL Policy: unexpected end of rules, expected '}'")
            if text == ",":
                self.take()
                continue
            items.append(self.item())

    def item(self) -> _Item:
        keys: list[str] = []
        while self.peek()[0] in ("word", "string"):
            keys.append(self.scalar(*self.take()))
        _, text = self.take()
        if not keys:
            raise PolicyError(f"Failed to parse ACL Policy: expected a key, found {text or 'the end'!r}")
        if text in ("=", ":") and len(keys) == 1:
            return _Item(keys[0], (), self.value())
        if text == "{":
            return _Item(keys[0], tuple(keys[1:]), self.body("}"))
        raise PolicyError(f"Failed to parse ACL Policy: after {keys[-1]!r}, expected '=' or '{{'")

    def value(self) -> Any:
        kind, text = self.take()
        if text == "[" and kind == "punct":
            values = []
            while self.peek()[1] != "]":
                if self.peek()[0] == "end":
                    raise PolicyError("Failed to parse ACL Policy: unexpected end of rules, expected ']'")
                values.append(self.value())
                if self.peek()[1] == ",":
                    self.take()
            self.take()
            return values
        if text == "{" and kind == "punct":
            return self.body("}")
        if kind in ("string", "number", "word"):
            return self.scalar(kind, text)
        raise PolicyError(f"Failed to parse ACL Policy: expected a value, found {text or 'the end'!r}")

    @staticmethod
    def scalar(kind: str, text: str) -> Any:
        if kind == "string":
            return orjson.loads(text)
        if kind == "number":
            return float(text) if "." in text else int(text)
        return {"true": True, "false": False}.get(text, text)


def _from_json(document: object) -> tuple[_Item, ...]:
    """JSON rules as the items their HCL would read as (an object's keys are nested blocks)."""
    if not isinstance(document, dict):
        raise PolicyError("Failed to parse ACL Policy: JSON rules must be an object")
    return tuple(
        _Item(key, (), _from_json(value) if isinstance(value, dict) else value)
        for key, value in document.items()
    )


def _read(rules: str) -> tuple[_Item, ...]:
    if rules.lstrip().startswith("{"):
        try:
            return _from_json(orjson.loads(rules))
        except orjson.JSONDecodeError as exc:
            raise PolicyError(f"Failed to parse ACL Policy: {exc}") from None
    return _Reader(rules).body("")


# -- the policy ----------------------------------------------------------------------------------


@final
@frozen
class VariablesRule:
    """A ``variables { path "..." }`` rule of a namespace: capabilities on the paths it matches."""

    path: str
    capabilities: frozenset[str]


@final
@frozen
class NamespaceRule:
    """A ``namespace "name"`` block: its capabilities (the policy's expanded in) and variables rules."""

    name: str
    capabilities: frozenset[str]
    variables: tuple[VariablesRule, ...] = ()


@final
@frozen
class Policy:
    """One policy's rules, read and checked as Nomad reads them."""

    namespaces: tuple[NamespaceRule, ...] = ()
    agent: str = ""
    node: str = ""
    operator: str = ""


def _labelled(item: _Item) -> Iterable[tuple[str, tuple[_Item, ...]]]:
    """``kind "name" { }`` as (name, body); also ``kind { name { } }``, as JSON rules nest them."""
    if not isinstance(item.value, tuple):
        raise PolicyError(f"Invalid policy: {item.key} must be a block")
    if item.labels:
        yield item.labels[0], item.value
        return
    for inner in item.value:
        if not isinstance(inner.value, tuple):
            raise PolicyError(f"Invalid policy: {item.key} needs a name")
        yield inner.key, inner.value


def _attributes(body: Sequence[_Item], allowed: Sequence[str], where: str) -> dict[str, Any]:
    attributes = {}
    for item in body:
        if item.key not in allowed:
            raise PolicyError(f"Invalid or duplicate policy keys: {item.key} (in {where})")
        attributes[item.key] = item.value
    return attributes


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"Invalid policy: {where} must be a list of strings")
    return list(value)


def _variables(namespace: str, body: Sequence[_Item]) -> tuple[VariablesRule, ...]:
    rules = []
    for item in body:
        if item.key != "path":
            raise PolicyError(f"Invalid or duplicate policy keys: {item.key} (in namespace {namespace})")
        for path, path_body in _labelled(item):
            if path.startswith("/"):
                raise PolicyError(
                    f"Invalid variable path {path!r} in namespace {namespace}: cannot start with a "
                    "leading '/'"
                )
            raw = _attributes(path_body, ("capabilities",), f"path {path}").get("capabilities", [])
            capabilities = _strings(raw, "capabilities")
            for capability in capabilities:
                if capability not in VARIABLE_CAPABILITIES:
                    raise PolicyError(f"Invalid variable capability '{capability}' in namespace {namespace}")
            if "deny" in capabilities:
                capabilities = ["deny"]
            elif "read" in capabilities:
                capabilities.append("list")
            rules.append(VariablesRule(path, frozenset(capabilities)))
    if not rules:
        raise PolicyError(f"Invalid variable policy: no variable paths in namespace {namespace}")
    return tuple(rules)


def _namespace(name: str, body: Sequence[_Item]) -> NamespaceRule:
    if not _VALID_NAMES["namespace"].match(name):
        raise PolicyError(f"Invalid namespace name: {name!r}")
    attributes = _attributes(body, ("policy", "capabilities", "variables"), f"namespace {name}")
    policy = attributes.get("policy", "")
    if policy and policy not in _NAMESPACE_POLICIES:
        raise PolicyError(f"Invalid namespace policy: {policy!r} (namespace {name})")
    capabilities = _strings(attributes.get("capabilities", []), "capabilities")
    for capability in capabilities:
        if capability not in NAMESPACE_CAPABILITIES:
            raise PolicyError(f"Invalid namespace capability '{capability}' (namespace {name})")
    capabilities += _EXPANDED.get(policy, ())
    capabilities += [implied for c in capabilities for implied in _IMPLIED.get(c, ())]
    variables = attributes.get("variables")
    rules = () if variables is None else _variables(name, variables if isinstance(variables, tuple) else ())
    return NamespaceRule(name, frozenset(capabilities), rules)


def _level(item: _Item) -> str:
    if not isinstance(item.value, tuple):
        raise PolicyError(f"Invalid policy: {item.key} must be a block")
    allowed = ("policy", "capabilities") if item.key == "operator" else ("policy",)
    level = _attributes(item.value, allowed, item.key).get("policy", "")
    if level not in _LEVELS and not (item.key == "plugin" and level == "list"):
        raise PolicyError(f"Invalid {item.key} policy: {level!r}")
    return str(level)


def parse_policy(rules: str) -> Policy:
    """The policy ``rules`` (HCL or JSON) grant; PolicyError for rules Nomad would refuse."""
    namespaces: list[NamespaceRule] = []
    levels: dict[str, str] = {}
    items = _read(rules)
    for item in items:
        if item.key == "namespace":
            namespaces += [_namespace(name, body) for name, body in _labelled(item)]
        elif item.key in _LABELLED_BLOCKS:
            for name, _ in _labelled(item):
                if not _VALID_NAMES[item.key].match(name):
                    raise PolicyError(f"Invalid {item.key} name: {name!r}")
        elif item.key in _LEVEL_BLOCKS:
            levels[item.key] = _level(item)
        else:
            raise PolicyError(f"Invalid or duplicate policy keys: {item.key}")
    if not items:
        raise PolicyError(f"Invalid policy: {rules}")
    return Policy(
        tuple(namespaces),
        agent=levels.get("agent", ""),
        node=levels.get("node", ""),
        operator=levels.get("operator", ""),
    )


# -- what a set of policies allows ----------------------------------------------------------------


def glob_matches(pattern: str, name: str) -> bool:
    """go-glob's ``Glob``: ``*`` stands for any text, nothing else is special."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return name == pattern
    if not name.startswith(parts[0]):
        return False
    rest = name[len(parts[0]) :]
    for part in parts[1:-1]:
        found = rest.find(part)
        if found < 0:
            return False
        rest = rest[found + len(part) :]
    return rest.endswith(parts[-1])


def _closest(globs: Mapping[str, set[str]], name: str) -> set[str] | None:
    matches = [(len(name) - len(key) + key.count("*"), key) for key in globs if glob_matches(key, name)]
    if not matches:
        return None
    closest = min(difference for difference, _ in matches)
    return globs[max(key for difference, key in matches if difference == closest)]


def _most_privileged(a: str, b: str) -> str:
    for level in ("deny", "write", "read", "list"):
        if level in (a, b):
            return level
    return ""


@final
class Acl:
    """What a token's policies allow together (Nomad's ``NewACL``); a management token may do
    anything."""

    def __init__(self, policies: Iterable[Policy] = (), *, management: bool = False) -> None:
        self.management = management
        self._namespaces: dict[str, set[str]] = {}
        self._namespace_globs: dict[str, set[str]] = {}
        self._variables: dict[str, set[str]] = {}
        self._variable_globs: dict[str, set[str]] = {}
        self._levels = {"agent": "", "node": "", "operator": ""}
        for policy in policies:
            for rule in policy.namespaces:
                self._add_namespace(rule)
            for scope in self._levels:
                self._levels[scope] = _most_privileged(self._levels[scope], getattr(policy, scope))

    def _add_namespace(self, rule: NamespaceRule) -> None:
        glob = "*" in rule.name
        capabilities = (self._namespace_globs if glob else self._namespaces).setdefault(rule.name, set())
        for path_rule in rule.variables:
            key = f"{rule.name}\x00{path_rule.path}"
            table = self._variable_globs if glob or "*" in path_rule.path else self._variables
            table.setdefault(key, set()).update(path_rule.capabilities)
        if "deny" in capabilities:
            return
        if "deny" in rule.capabilities:
            capabilities.clear()
            capabilities.add("deny")
            return
        capabilities.update(rule.capabilities)

    def allows_namespace(self, namespace: str, capability: str) -> bool:
        """Whether ``capability`` is granted in ``namespace`` ("*": in any namespace)."""
        if self.management:
            return True
        if namespace == "*" and any(
            capability in c for c in (*self._namespaces.values(), *self._namespace_globs.values())
        ):
            return True
        found = self._namespaces.get(namespace)
        if found is None:
            found = _closest(self._namespace_globs, namespace)
        return found is not None and capability in found

    def allows_namespace_at_all(self, namespace: str) -> bool:
        """Whether any capability but deny is granted in ``namespace`` (Nomad's ``AllowNamespace``)."""
        if self.management:
            return True
        found = self._namespaces.get(namespace)
        if found is None:
            found = _closest(self._namespace_globs, namespace)
        return bool(found) and "deny" not in (found or ())

    def allows_variable(self, namespace: str, path: str, capability: str) -> bool:
        """Whether ``capability`` (read, write, list, destroy) is granted on the variable."""
        if self.management:
            return True
        key = f"{namespace}\x00{path}"
        found = self._variables.get(key)
        if found is None:
            found = _closest(self._variable_globs, key)
        return found is not None and capability in found

    def allows_variable_search(self, namespace: str) -> bool:
        """Whether any variables rule names ``namespace`` (Nomad's loose check before a list)."""
        if self.management:
            return True
        keys = [*self._variables, *self._variable_globs]
        return bool(keys) if namespace == "*" else any(key.startswith(namespace) for key in keys)

    def allows(self, scope: str, level: str) -> bool:
        """Whether the ``node``, ``agent`` or ``operator`` policy grants ``level`` (read or write)."""
        if self.management:
            return True
        granted = self._levels[scope]
        return granted == "write" or (level == "read" and granted == "read")
