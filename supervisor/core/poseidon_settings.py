"""Poseidon's configuration as Poseidon reads it: its ``configuration.yaml`` decoded as yaml.v3
(v3.0.1) decodes it into Poseidon's ``configuration`` struct (``internal/config/config.go``), then,
if asked, its ``POSEIDON_<STRUCT>_<FIELD>`` variables applied over the file as its
``readFromEnvironment`` applies them. The result is every field's value, each with where it came
from; ``poseidon_config`` writes our configuration from it.

Why PyYAML's nodes and not ``yaml.safe_load``: PyYAML resolves plain scalars by YAML 1.1 (``yes``
is true, ``token: 123456`` a number), while yaml.v3 resolves them by YAML 1.2's core schema and then
decodes each by its field's Go type (decode.go ``scalar``, resolve.go ``resolve``): a string field
takes the scalar's text as written, an integer field takes ``30_000``, ``0x10`` or a float (cut to
its integer), a boolean field ``true`` and also ``yes``, ``on``, ``n``, .... So the file is only
composed by PyYAML's safe loader, and each node is decoded here against its field's Go type:

- a key Poseidon's struct does not have is ignored (``yaml.Unmarshal`` does not set ``KnownFields``),
  so it is reported, not refused;
- a value of the wrong type is a ``yaml.TypeError``, on which Poseidon stops (``log.Fatal``): a
  ConfigError here, as is a key given twice in one mapping (yaml.v3's ``uniqueKeys``);
- ``null`` or an empty value leaves a field as it was, but empties a list and a pointer;
- ``<<`` merges a mapping, the mapping's own keys winning.

The variables (``loadValue``): a string is taken as it is, an integer by ``strconv.Atoi`` and a
boolean by ``strconv.ParseBool`` (a value that does not parse is ignored, with Poseidon's warning);
a list is split on white space and appended to the file's. A float, an unsigned integer, a pointer
or a map cannot be set from a variable (Poseidon warns and ignores it), and a list of anything but
strings makes ``reflect.AppendSlice`` panic, so Poseidon could not start: a ConfigError here.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final, final

import yaml
from attrs import field, frozen

from ..base.errors import ConfigError
from .poseidon_templates import go_atoi

__all__ = ["CONFIGURATION", "Field", "Kind", "PoseidonSettings", "read_poseidon_settings", "variables"]

PREFIX: Final = "POSEIDON"
_INT64: Final = (-(2**63), 2**63 - 1)
_UINT64_MAX: Final = 2**64 - 1
# yaml.v3's resolve.go: the plain scalars looked up in a table, and its float pattern.
_TABLE: Final[dict[str, tuple[str, Any]]] = {
    **dict.fromkeys(("true", "True", "TRUE"), ("bool", True)),
    **dict.fromkeys(("false", "False", "FALSE"), ("bool", False)),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), ("null", None)),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), ("float", math.nan)),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), ("float", math.inf)),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), ("float", -math.inf)),
    "<<": ("merge", "<<"),
}
_FLOAT: Final = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
# decode.go: the words a boolean field takes beside true and false (YAML 1.1's).
_YES: Final = frozenset({"y", "Y", "yes", "Yes", "YES", "on", "On", "ON"})
_NO: Final = frozenset({"n", "N", "no", "No", "NO", "off", "Off", "OFF"})
# Go's strconv.ParseBool.
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_DIGITS: Final = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}


class Kind(enum.Enum):
    """A field's Go type, as far as decoding it from YAML or a variable goes."""

    STRING = enum.auto()
    INT = enum.auto()
    UINT = enum.auto()
    FLOAT = enum.auto()
    BOOL = enum.auto()
    STRINGS = enum.auto()
    STRUCT = enum.auto()
    # A pointer (to a struct, or to an int): null makes it nil.
    POINTER = enum.auto()
    # A list of structs or of lists, and a map: taken from the file as they are, never translated.
    LIST = enum.auto()
    MAP = enum.auto()
    # A Go function or interface (Sentry's hooks): no value in a file can be one.
    CODE = enum.auto()

    @property
    def text(self) -> str:
        """The kind in words, as an error names it."""
        return _KIND_TEXTS[self]


_KIND_TEXTS: Final = {
    Kind.STRING: "a string",
    Kind.INT: "an integer",
    Kind.UINT: "an integer of 0 or more",
    Kind.FLOAT: "a number",
    Kind.BOOL: "a boolean",
    Kind.STRINGS: "a list of strings",
    Kind.STRUCT: "a mapping of keys",
    Kind.POINTER: "a mapping or null",
    Kind.LIST: "a list",
    Kind.MAP: "a mapping",
    Kind.CODE: "code",
}


@final
@frozen
class Field:
    """A field of Poseidon's configuration: its Go name (which its variable's name is made of), its
    kind, its default, its YAML key (empty: the Go name in lower case, as yaml.v3 takes an untagged
    field), its fields (a struct's, or a pointer's target's) and, for a pointer, what it points to."""

    go: str
    kind: Kind
    default: Any = None
    key: str = ""
    fields: tuple[Field, ...] = ()
    target: Kind | None = None

    @property
    def yaml_key(self) -> str:
        """The field's key in the file."""
        return self.key or self.go.lower()


def _tls() -> tuple[Field, ...]:
    return (
        Field("Active", Kind.BOOL, False),
        Field("CAFile", Kind.STRING, "", "cafile"),
        Field("CertFile", Kind.STRING, "", "certfile"),
        Field("KeyFile", Kind.STRING, "", "keyfile"),
    )


def _struct(go: str, *fields: Field, key: str = "") -> Field:
    return Field(go, Kind.STRUCT, key=key, fields=fields)


# Poseidon's ``configuration`` struct with its defaults (``config.Config``), Nomad's
# ``api.NetworkResource`` (1.10.5) and sentry-go's ``ClientOptions`` (0.36.2) included, in the
# order of their fields (the order ``readFromEnvironment`` reads the variables in).
CONFIGURATION: Final = (
    _struct(
        "Server",
        Field("Address", Kind.STRING, "127.0.0.1"),
        Field("Port", Kind.INT, 7200),
        Field("SystemdSocketActivation", Kind.BOOL, False),
        Field("Token", Kind.STRING, ""),
        _struct("TLS", *_tls()),
        Field("InteractiveStderr", Kind.BOOL, True),
        Field("TemplateJobFile", Kind.STRING, ""),
        _struct(
            "Alert",
            Field("PrewarmingPoolThreshold", Kind.FLOAT, 0.0),
            Field("PrewarmingPoolReloadTimeout", Kind.UINT, 0),
        ),
        # Its default is a random token, made at each start.
        Field("LoggingFilterToken", Kind.STRING, None),
    ),
    _struct(
        "Nomad",
        Field("Enabled", Kind.BOOL, True),
        Field("Address", Kind.STRING, "127.0.0.1"),
        Field("Port", Kind.INT, 4646),
        Field("Token", Kind.STRING, ""),
        _struct("TLS", *_tls()),
        Field("Namespace", Kind.STRING, "default"),
        Field("DisableForcePull", Kind.BOOL, False),
        _struct(
            "Network",
            Field("Mode", Kind.STRING, "bridge"),
            Field("Device", Kind.STRING, ""),
            Field("CIDR", Kind.STRING, ""),
            Field("IP", Kind.STRING, ""),
            Field(
                "DNS",
                Kind.POINTER,
                fields=(
                    Field("Servers", Kind.STRINGS, ()),
                    Field("Searches", Kind.STRINGS, ()),
                    Field("Options", Kind.STRINGS, ()),
                ),
            ),
            Field("ReservedPorts", Kind.LIST),
            Field("DynamicPorts", Kind.LIST),
            Field("Hostname", Kind.STRING, ""),
            Field("MBits", Kind.POINTER, target=Kind.INT),
            Field("CNI", Kind.POINTER, fields=(Field("Args", Kind.MAP),)),
        ),
    ),
    _struct(
        "AWS",
        Field("Enabled", Kind.BOOL, False),
        Field("Endpoint", Kind.STRING, ""),
        Field("Functions", Kind.STRINGS, ()),
    ),
    _struct("Logger", Field("Formatter", Kind.STRING, "TextFormatter"), Field("Level", Kind.STRING, "INFO")),
    _struct(
        "Profiling",
        Field("CPUEnabled", Kind.BOOL, False),
        Field("CPUFile", Kind.STRING, ""),
        Field("MemoryInterval", Kind.UINT, 0),
        Field("MemoryThreshold", Kind.UINT, 1000),
    ),
    _struct(
        "Sentry",
        Field("Dsn", Kind.STRING, ""),
        Field("Debug", Kind.BOOL, False),
        Field("AttachStacktrace", Kind.BOOL, True),
        Field("SampleRate", Kind.FLOAT, 0.0),
        Field("EnableTracing", Kind.BOOL, False),
        Field("TracesSampleRate", Kind.FLOAT, 0.0),
        Field("TracesSampler", Kind.CODE),
        Field("IgnoreErrors", Kind.STRINGS, ()),
        Field("IgnoreTransactions", Kind.STRINGS, ()),
        Field("SendDefaultPII", Kind.BOOL, False),
        Field("BeforeSend", Kind.CODE),
        Field("BeforeSendLog", Kind.CODE),
        Field("BeforeSendTransaction", Kind.CODE),
        Field("BeforeBreadcrumb", Kind.CODE),
        Field("Integrations", Kind.CODE),
        Field("DebugWriter", Kind.CODE),
        Field("Transport", Kind.CODE),
        Field("ServerName", Kind.STRING, ""),
        Field("Release", Kind.STRING, ""),
        Field("Dist", Kind.STRING, ""),
        Field("Environment", Kind.STRING, ""),
        Field("MaxBreadcrumbs", Kind.INT, 0),
        Field("MaxSpans", Kind.INT, 0),
        Field("HTTPClient", Kind.POINTER, target=Kind.MAP),
        Field("HTTPTransport", Kind.CODE),
        Field("HTTPProxy", Kind.STRING, ""),
        Field("HTTPSProxy", Kind.STRING, ""),
        Field("CaCerts", Kind.POINTER, target=Kind.MAP),
        Field("MaxErrorDepth", Kind.INT, 0),
        Field("Tags", Kind.MAP),
        Field("EnableLogs", Kind.BOOL, False),
        Field("TraceIgnoreStatusCodes", Kind.LIST),
    ),
    _struct(
        "InfluxDB",
        Field("URL", Kind.STRING, ""),
        Field("Token", Kind.STRING, ""),
        Field("Organization", Kind.STRING, ""),
        Field("Bucket", Kind.STRING, ""),
        Field("Stage", Kind.STRING, ""),
    ),
)


def _leaves(fields: tuple[Field, ...], path: str, variable: str) -> Iterator[tuple[str, str, Field]]:
    """Every field that holds a value, as ``(path, variable, field)``: a struct's fields, not the
    struct; a pointer, then its target's fields (which no variable reaches)."""
    for f in fields:
        key, name = f"{path}{f.yaml_key}", f"{variable}_{f.go.upper()}"
        if f.kind is Kind.STRUCT:
            yield from _leaves(f.fields, key + ".", name)
            continue
        yield key, name, f
        if f.kind is Kind.POINTER:
            yield from ((p, "", g) for p, _, g in _leaves(f.fields, key + ".", name))


def variables() -> dict[str, str]:
    """Every variable Poseidon reads, and the key it sets."""
    return {name: path for path, name, f in _leaves(CONFIGURATION, "", PREFIX) if name}


@final
@frozen
class PoseidonSettings:
    """Every value Poseidon runs with, by its dotted YAML key (``server.tls.active``); where each
    came from (``line 12`` of the file, or a variable's name; absent: Poseidon's default); and the
    notes worth telling: keys and variables Poseidon ignores."""

    values: Mapping[str, Any]
    origins: Mapping[str, str] = field(factory=dict)
    notes: tuple[str, ...] = ()

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def given(self, key: str) -> bool:
        """Whether the file or a variable set ``key``."""
        return key in self.origins

    def origin(self, key: str) -> str:
        """Where ``key``'s value comes from, in words."""
        return self.origins.get(key, "Poseidon's default")


# -- yaml.v3's scalars ----------------------------------------------------------------------------


def _go_int(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 0, 64)`` without its range check: a sign, then a base by its
    prefix (``0x``, ``0o``, ``0b``, or a bare ``0`` for octal) or decimal."""
    sign = -1 if text[:1] == "-" else 1
    body = text[1:] if text[:1] in "+-" else text
    base = 10
    if body[:2].lower() in ("0x", "0o", "0b"):
        base, body = {"x": 16, "o": 8, "b": 2}[body[1].lower()], body[2:]
    elif len(body) > 1 and body[0] == "0":
        base, body = 8, body[1:]
    if not body or any(c not in _DIGITS[base] for c in body):
        return None
    return sign * int(body, base)


def resolve(text: str) -> tuple[str, Any]:
    """A plain scalar's tag and value by yaml.v3's ``resolve``: ``null``, ``bool``, ``int``,
    ``float``, ``merge`` or ``str``."""
    if text in _TABLE:
        return _TABLE[text]
    hint = text[:1]
    if hint == ".":
        if "_" not in text:
            try:
                return "float", float(text)
            except ValueError:
                pass
    elif hint and hint in "+-0123456789":
        plain = text.replace("_", "")
        number = _go_int(plain)
        if number is not None and _INT64[0] <= number <= _INT64[1]:
            return "int", number
        if number is not None and 0 < number <= _UINT64_MAX and plain[:1] != "+":  # ParseUint: no sign
            return "int", number
        if _FLOAT.fullmatch(plain) and math.isfinite(float(plain)):
            return "float", float(plain)
    return "str", text


# -- the file -------------------------------------------------------------------------------------


def _compose(text: str, source: str) -> yaml.Node | None:
    """The file's first document as nodes (yaml.v3's Unmarshal reads the first one only)."""
    loader = yaml.SafeLoader(text)
    try:
        return loader.get_node() if loader.check_node() else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}{where}: not YAML: {problem}") from None
    finally:
        loader.dispose()


def _is_scalar(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode)


def _is_null(node: yaml.Node) -> bool:
    """A plain ``null``, ``~`` or nothing: a quoted one is a string."""
    return isinstance(node, yaml.ScalarNode) and not node.style and resolve(node.value)[0] == "null"


def _shown(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        return repr(node.value)
    return "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"


class _Decoder:
    """Decodes the file's nodes into ``values``, keeping each value's line in ``origins``."""

    def __init__(self, source: str, values: dict[str, Any]) -> None:
        self.source = source
        self.values = values
        self.origins: dict[str, str] = {}
        self.notes: list[str] = []

    def refuse(self, node: yaml.Node, path: str, kind: Kind) -> ConfigError:
        return ConfigError(
            f"{self.source} line {node.start_mark.line + 1}: {path}: {_shown(node)} is not {kind.text} "
            "(Poseidon stops on it too)"
        )

    def set(self, path: str, value: Any, node: yaml.Node) -> None:
        self.values[path] = value
        self.origins[path] = f"line {node.start_mark.line + 1}"

    def struct(self, node: yaml.Node, fields: tuple[Field, ...], path: str) -> None:
        """A mapping into a struct; ``<<`` merges another in, under the mapping's own keys."""
        if _is_null(node):
            return
        if not isinstance(node, yaml.MappingNode):
            raise self.refuse(node, path.rstrip(".") or "the file", Kind.STRUCT)
        by_key = {f.yaml_key: f for f in fields}
        seen: set[str] = set()
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if not _is_scalar(key_node):
                raise self.refuse(key_node, f"{path}(a key)", Kind.STRING)
            if not key_node.style and key_node.value == "<<":
                merges.append(value_node)
                continue
            if _is_null(key_node):
                continue
            key = key_node.value
            if key in seen:
                raise ConfigError(
                    f"{self.source} line {key_node.start_mark.line + 1}: {path}{key} is given twice "
                    "(Poseidon stops on it too)"
                )
            seen.add(key)
            if key not in by_key:
                self.notes.append(
                    f"{self.source} line {key_node.start_mark.line + 1}: {path}{key}: "
                    "Poseidon has no such key and ignores it; not translated"
                )
                continue
            self.value(value_node, by_key[key], f"{path}{key}")
        for merged in merges:  # each key merged once: the mapping's own first, then the first merged
            for each in merged.value if isinstance(merged, yaml.SequenceNode) else [merged]:
                if not isinstance(each, yaml.MappingNode):
                    raise self.refuse(each, f"{path}<<", Kind.STRUCT)
                new = [(k, v) for k, v in each.value if not (_is_scalar(k) and k.value in seen)]
                seen |= {k.value for k, _ in new if _is_scalar(k)}
                self.struct(yaml.MappingNode(each.tag, new, each.start_mark, each.end_mark), fields, path)

    def value(self, node: yaml.Node, f: Field, path: str) -> None:
        """A node into the field ``f`` at ``path``."""
        if f.kind is Kind.STRUCT:
            self.struct(node, f.fields, path + ".")
        elif f.kind is Kind.POINTER:
            self.pointer(node, f, path)
        elif f.kind in (Kind.STRINGS, Kind.LIST, Kind.MAP):
            self.collection(node, f.kind, path)
        elif _is_null(node):
            return
        elif f.kind is Kind.CODE:
            raise ConfigError(
                f"{self.source} line {node.start_mark.line + 1}: {path}: Poseidon cannot take a value "
                "here (a Go function or interface); remove it"
            )
        else:
            self.set(path, self.scalar(node, f.kind, path), node)

    def pointer(self, node: yaml.Node, f: Field, path: str) -> None:
        """Null makes it nil; otherwise its target, a struct made for it or a value."""
        if _is_null(node):
            self.set(path, None, node)
        elif f.target is not None and f.target is not Kind.MAP:
            self.set(path, self.scalar(node, f.target, path), node)
        elif isinstance(node, yaml.MappingNode):
            self.set(path, yaml.safe_load(yaml.serialize(node)), node)
            if f.fields:
                self.struct(node, f.fields, path + ".")
        else:
            raise self.refuse(node, path, Kind.POINTER)

    def collection(self, node: yaml.Node, kind: Kind, path: str) -> None:
        """A list or a map: null empties it; a list of strings is decoded, the others kept as read."""
        wanted = yaml.MappingNode if kind is Kind.MAP else yaml.SequenceNode
        if _is_null(node):
            self.set(path, (), node)
        elif not isinstance(node, wanted):
            raise self.refuse(node, path, kind)
        elif isinstance(node, yaml.SequenceNode) and kind is Kind.STRINGS:
            self.set(path, self.strings(node, path), node)
        else:
            self.set(path, yaml.safe_load(yaml.serialize(node)), node)

    def strings(self, node: yaml.SequenceNode, path: str) -> tuple[str, ...]:
        """A list of strings: each item's text; a null item is left out, as yaml.v3 leaves it."""
        items: list[str] = []
        for item in node.value:
            if not isinstance(item, yaml.ScalarNode):
                raise self.refuse(item, f"{path}[{len(items)}]", Kind.STRING)
            if not _is_null(item):
                items.append(item.value)
        return tuple(items)

    def scalar(self, node: yaml.Node, kind: Kind, path: str) -> Any:
        """A scalar into a field of ``kind``, by yaml.v3's ``scalar``."""
        if not isinstance(node, yaml.ScalarNode):
            raise self.refuse(node, path, kind)
        tag, value = ("str", node.value) if node.style else resolve(node.value)
        if kind is Kind.STRING:
            return node.value
        if kind is Kind.BOOL:
            if tag == "bool":
                return value
            if tag == "str" and value in _YES | _NO:
                return value in _YES
        elif kind is Kind.FLOAT and tag in ("int", "float"):
            return float(value)
        elif kind in (Kind.INT, Kind.UINT) and tag in ("int", "float"):
            if tag == "float" and math.isfinite(value):
                value = int(value)  # Go's conversion cuts a float to its integer
            low, high = _INT64 if kind is Kind.INT else (0, _UINT64_MAX)
            if isinstance(value, int) and low <= value <= high:
                return value
        raise self.refuse(node, path, kind)


# -- the variables --------------------------------------------------------------------------------


def _apply_environment(
    environ: Mapping[str, str], values: dict[str, Any], origins: dict[str, str], notes: list[str]
) -> None:
    """The ``POSEIDON_*`` variables over ``values``, as ``readFromEnvironment`` applies them."""
    known = set()
    for path, variable, f in _leaves(CONFIGURATION, "", PREFIX):
        if not variable:
            continue
        known.add(variable)
        if variable not in environ:
            continue
        text = environ[variable]
        if f.kind is Kind.STRING:
            value: Any = text
        elif f.kind is Kind.INT and (number := go_atoi(text)) is not None:
            value = number
        elif f.kind is Kind.BOOL and text in _GO_TRUE | _GO_FALSE:
            value = text in _GO_TRUE
        elif f.kind is Kind.STRINGS:
            if text == '"':
                raise ConfigError(f"{variable}: a lone '\"' makes Poseidon panic; unset it")
            if len(text) > 1 and text[0] == text[-1] == '"':
                text = text[1:-1]
            value = (*values[path], *text.split())
        elif f.kind is Kind.LIST:
            raise ConfigError(
                f"{variable}: Poseidon panics on it ({path} is a list of {f.go}, not of strings); unset it"
            )
        else:
            why = (
                f"not {f.kind.text}"
                if f.kind in (Kind.INT, Kind.BOOL)
                else f"{f.kind.text} cannot be set from a variable"
            )
            notes.append(f"{variable}: Poseidon ignores it ({path}: {why}); not applied")
            continue
        values[path] = value
        origins[path] = variable
    for name in sorted(environ):
        if name.startswith(PREFIX + "_") and name not in known:
            notes.append(f"{name}: Poseidon reads no such variable; not applied")


def read_poseidon_settings(
    text: str, *, source: str, environ: Mapping[str, str] | None = None
) -> PoseidonSettings:
    """Poseidon's settings from its file's ``text`` (named ``source`` in errors) and, if given, the
    ``POSEIDON_*`` variables of ``environ``. ConfigError, in one line, for what Poseidon would not
    start with: a file that is not YAML or not a mapping, a value of the wrong type, a key twice."""
    values = {path: f.default for path, _, f in _leaves(CONFIGURATION, "", PREFIX)}
    decoder = _Decoder(source, values)
    node = _compose(text, source)
    if node is not None:
        decoder.struct(node, CONFIGURATION, "")
    if environ is not None:
        _apply_environment(environ, values, decoder.origins, decoder.notes)
    return PoseidonSettings(values, decoder.origins, tuple(decoder.notes))
