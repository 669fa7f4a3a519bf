"""The daemon's settings: a TOML file, every key overridable by ``SUPERVISOR_<SECTION>_<KEY>``, and
Nomad's own variables (``NOMAD_ADDR``, ``NOMAD_TOKEN``, ...) for the Nomad connection.

What each key is, its default and its rule, is written once, in ``config_schema``; here the file
and the variables are structured into those classes (cattrs, strictly typed: a string is no
number). An invalid file or value, a misspelt key or variable, or a token too short to be secret
stops startup with a ConfigError that names the key.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote

from ..base.errors import ConfigError
from .config_rules import described, secret_problems
from .config_schema import (
    LOG_FORMATS,
    LOG_LEVELS,
    MIN_SECRET_LENGTH,
    SECRET_TOKEN,
    AdmissionSettings,
    AlertSettings,
    EnvironmentEntry,
    ExecutionSettings,
    FactorySettings,
    HaSettings,
    HealthSettings,
    LogSettings,
    NetworkSettings,
    NomadSection,
    ServerSettings,
    Settings,
    SupervisionSettings,
    TlsSettings,
    WatcherSettings,
)
from .environments import ExecutionEnvironment, environment_from_dict

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MIN_SECRET_LENGTH",
    "SECTIONS",
    "AdmissionSettings",
    "AlertSettings",
    "ExecutionSettings",
    "FactorySettings",
    "HaSettings",
    "HealthSettings",
    "LogSettings",
    "NetworkSettings",
    "NomadSection",
    "ServerSettings",
    "Settings",
    "SupervisionSettings",
    "TlsSettings",
    "WatcherSettings",
    "config_path",
    "load_settings",
    "section_values",
    "variable_name",
]

# Each section's name in the file (``nomad.network`` is the table ``network`` of ``[nomad]``) and
# its field of Settings, in the order of the file; and each one's class.
_FIELDS: Final[dict[str, str]] = {
    a.metadata.get("section", a.name): a.name for a in attrs.fields(Settings) if a.name != "environments"
}
SECTIONS: Final[dict[str, type[Any]]] = {name: type(getattr(Settings(), f)) for name, f in _FIELDS.items()}
for _cls in (*SECTIONS.values(), EnvironmentEntry):
    attrs.resolve_types(_cls)  # each field's type as a type, for the variables' parsing
_PREFIX: Final = "SUPERVISOR_"
CONFIG_VARIABLE: Final = f"{_PREFIX}CONFIG"
# Supervisord's variables, set in the environment of every program it runs: not ours.
_SUPERVISORD_VARIABLES: Final = frozenset(
    {"SUPERVISOR_ENABLED", "SUPERVISOR_SERVER_URL", "SUPERVISOR_PROCESS_NAME", "SUPERVISOR_GROUP_NAME"}
)
_TRUE: Final = ("1", "true", "yes")
_FALSE: Final = ("0", "false", "no")


def variable_name(section: str, key: str) -> str:
    """The environment variable that overrides ``section.key``."""
    return f"{_PREFIX}{section}_{key}".upper().replace(".", "_")


def section_values(settings: Settings, section: str) -> Any:
    """The values of the section named ``section`` in the file (a key of ``SECTIONS``)."""
    return getattr(settings, _FIELDS[section])


def _tables(document: Mapping[str, Any]) -> dict[str, Any]:
    """Each section's table in the file, a nested one taken out of its parent's."""
    tables = {name: document.get(name, {}) for name in SECTIONS if "." not in name}
    for name in SECTIONS:
        parent, dot, child = name.partition(".")
        if dot and isinstance(tables[parent], Mapping):
            tables[name] = tables[parent].get(child, {})
            tables[parent] = {k: v for k, v in tables[parent].items() if k != child}
    return tables


def config_path(path: str | Path | None, environ: Mapping[str, str]) -> str | None:
    """The configuration file: ``path``, else ``SUPERVISOR_CONFIG``, else none."""
    return str(path) if path else environ.get(CONFIG_VARIABLE) or None


# -- strict types ---------------------------------------------------------------------------------


def _strict_int(value: Any, _: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("int")
    return value


def _strict_float(value: Any, _: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("float")
    return float(value)


def _strict_bool(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("bool")
    return value


def _strict_str(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("str")
    return value


def _strings(value: Any, _: Any) -> tuple[str, ...]:
    """One string or a list of them; blanks around each dropped, empty ones left out."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise TypeError("list of strings")
    return tuple(i.strip() for i in items if i.strip())


def _integers(value: Any, _: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise TypeError("list of integers")
    return tuple(_strict_int(i, int) for i in value)


def _converter() -> cattrs.Converter:
    converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True)
    converter.register_structure_hook(int, _strict_int)
    converter.register_structure_hook(float, _strict_float)
    converter.register_structure_hook(bool, _strict_bool)
    converter.register_structure_hook(str, _strict_str)
    converter.register_structure_hook_func(lambda t: t == tuple[str, ...], _strings)
    converter.register_structure_hook_func(lambda t: t == tuple[int, ...], _integers)
    return converter


_CONVERTER: Final = _converter()
_TYPE_NAMES: Final = {
    int: "int",
    float: "float",
    bool: "bool",
    str: "str",
    tuple[str, ...]: "list of strings",
    tuple[int, ...]: "list of integers",
}


def _from_variable(name: str, text: str, kind: Any) -> Any:
    """A variable's text as a value of ``kind``: numbers, booleans, comma-separated lists."""
    try:
        if kind is bool:
            if text.strip().lower() not in (*_TRUE, *_FALSE):
                raise ValueError(text)
            return text.strip().lower() in _TRUE
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind == tuple[str, ...]:
            return text.split(",")
        return text
    except ValueError:
        raise ConfigError(f"{name}: {text!r} is not a valid {_TYPE_NAMES.get(kind, kind)}") from None


# -- errors, named ------------------------------------------------------------------------------


def _first_error(error: BaseException) -> tuple[str, BaseException]:
    """The first error inside cattrs' groups, and the key its note names (``""`` when none does)."""
    key = ""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
        notes = getattr(error, "__notes__", ())
        key = key or next((n.name for n in notes if isinstance(n, AttributeValidationNote)), "")
    return key, error


def _named(
    where: str, cls: type[Any], error: BaseException, values: Mapping[str, Any], origins: Mapping[str, str]
) -> ConfigError:
    """The first of cattrs' errors as one line that names the key (and the variable it came from)."""
    key, leaf = _first_error(error)
    if isinstance(leaf, ConfigError):  # a rule's: its message starts with the key
        key = str(leaf).partition(":")[0]
        origin = f" (from {origins[key]})" if key in origins else ""
        return ConfigError(f"{where}.{leaf}{origin}")
    if isinstance(leaf, KeyError):
        return ConfigError(f"{where}: {key} is required")
    origin = f" (from {origins[key]})" if key in origins else ""
    attribute = attrs.fields_dict(cls)[key]
    kind = _TYPE_NAMES.get(attribute.type, "value") if attribute.type is not None else "value"
    value = "the value" if described(attribute).secret else repr(values.get(key))
    return ConfigError(f"{where}.{key}: {value} is not a valid {kind}{origin}")


def _suggestion(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean {close[0]}?" if close else f" (known: {', '.join(known)})"


# -- loading --------------------------------------------------------------------------------------


def _read(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc


def _refuse_unknown_variables(environ: Mapping[str, str]) -> None:
    known = [CONFIG_VARIABLE] + [
        variable_name(section, a.name) for section, cls in SECTIONS.items() for a in attrs.fields(cls)
    ]
    for name in sorted(environ):
        if name.startswith(_PREFIX) and name not in known and name not in _SUPERVISORD_VARIABLES:
            # Compared without the prefix they share, which would make any two names look alike.
            close = difflib.get_close_matches(
                name.removeprefix(_PREFIX), [k.removeprefix(_PREFIX) for k in known], n=1
            )
            hint = (
                f"did you mean {_PREFIX}{close[0]}?"
                if close
                else "`supervisor config example` lists every key"
            )
            raise ConfigError(f"{name}: no such setting; {hint}")


def _section(name: str, cls: type[Any], table: Any, environ: Mapping[str, str]) -> Any:
    if not isinstance(table, Mapping):
        raise ConfigError(f"[{name}] must be a table")
    known = list(attrs.fields_dict(cls))
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"{name}.{unknown[0]}: unknown key{_suggestion(unknown[0], known)}")
    values = dict(table)
    origins = {}
    for attribute in attrs.fields(cls):
        variable = variable_name(name, attribute.name)
        if variable in environ:
            values[attribute.name] = _from_variable(variable, environ[variable], attribute.type)
            origins[attribute.name] = variable
    try:
        return _CONVERTER.structure(values, cls)
    except cattrs.BaseValidationError as error:
        raise _named(name, cls, error, values, origins) from None


def _environments(raw: Any) -> tuple[ExecutionEnvironment, ...]:
    if not isinstance(raw, list) or not all(isinstance(e, Mapping) for e in raw):
        raise ConfigError("environments: must be an array of tables ([[environments]])")
    environments = []
    for i, table in enumerate(raw):
        where = f"environments[{i}]"
        entry = _section(where, EnvironmentEntry, table, {})
        environments.append(environment_from_dict(attrs.asdict(entry), where=where, snake_case=True))
    ids = [e.id for e in environments]
    if len(ids) != len(set(ids)):
        raise ConfigError("environments: an id appears twice")
    return tuple(environments)


def _refuse_short_tokens(settings: Settings, environ: Mapping[str, str]) -> None:
    """A token too short to be secret, in a section or in ``NOMAD_TOKEN``, named (never shown)."""
    for name in SECTIONS:
        for problem in secret_problems(name, section_values(settings, name)):
            raise ConfigError(problem)
    nomad_token = environ.get("NOMAD_TOKEN", "")
    if not settings.nomad.token and not SECRET_TOKEN.test(nomad_token):
        raise ConfigError(
            f"NOMAD_TOKEN: a token of {len(nomad_token)} characters is too short to be secret; "
            f"must be {SECRET_TOKEN.text}"
        )


def load_settings(path: str | Path | None, environ: Mapping[str, str]) -> Settings:
    """Settings from ``path`` (or ``SUPERVISOR_CONFIG``; none: defaults) and the environment."""
    document = _read(config_path(path, environ))
    _refuse_unknown_variables(environ)
    unknown = sorted(set(document) - set(SECTIONS) - {"environments"})
    if unknown:
        raise ConfigError(
            f"{unknown[0]}: unknown section{_suggestion(unknown[0], [*SECTIONS, 'environments'])}"
        )
    tables = _tables(document)
    sections = {_FIELDS[name]: _section(name, cls, tables[name], environ) for name, cls in SECTIONS.items()}
    settings = Settings(**sections, environments=_environments(document.get("environments", [])))
    _refuse_short_tokens(settings, environ)
    if bool(settings.server_tls.cert_file) != bool(settings.server_tls.key_file):
        given, missing = (
            ("cert_file", "key_file") if settings.server_tls.cert_file else ("key_file", "cert_file")
        )
        raise ConfigError(f"server.tls.{missing}: required with server.tls.{given} (both files or neither)")
    return settings
