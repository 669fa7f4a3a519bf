"""The configuration as the log tells it: every key with its value and source when the daemon starts,
and on SIGHUP what changed, applied when it can change while the daemon runs.

What SIGHUP reloads: ``log.level`` and ``log.format`` (``RELOADABLE``), and the API's TLS certificate
and key, read again from their files for the connections accepted after. Every other key is read once,
by the part of the daemon that uses it; a change to one is logged as waiting for a restart. A file
that no longer loads changes nothing and is logged as an error: the daemon goes on as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

import attrs
from loguru import logger

from .. import __version__
from ..base.errors import ConfigError
from ..base.tls import ServerTls
from ..core.config import SECTIONS, Settings, section_values
from ..core.config_example import toml_value
from ..core.config_rules import described
from ..nomad import NomadSettings
from .check import value_sources
from .logs import MASK, LogStream

__all__ = ["RELOADABLE", "Reloader", "changes", "effective_values", "startup_line"]

# What SIGHUP applies: the log stream's own settings, which it can change between two lines.
RELOADABLE: Final = frozenset({"log.level", "log.format"})
_SOURCES: Final = (
    ("option", "from the command line"),
    ("file", "from the file"),
    ("env", "from the environment"),
    ("default", "defaults"),
)


def effective_values(settings: Settings, nomad: NomadSettings | None = None) -> dict[str, str]:
    """Every ``section.key`` and its value as TOML writes it, secrets as ``***``; with ``nomad``,
    the [nomad] keys that Nomad's own variables filled show what they were filled with."""
    values = {}
    for section, cls in SECTIONS.items():
        for attribute in attrs.fields(cls):
            value = getattr(section_values(settings, section), attribute.name)
            if nomad is not None and section == "nomad" and not value:
                value = (
                    nomad.addresses if attribute.name == "address" else getattr(nomad, attribute.name, value)
                )
            secret = described(attribute).secret and value
            values[f"{section}.{attribute.name}"] = MASK if secret else toml_value(value)
    return values


def startup_line(
    settings: Settings,
    path: str | None,
    environ: Mapping[str, str],
    nomad: NomadSettings | None,
    command_line: Mapping[str, str] | None = None,
) -> str:
    """One line: the version, the file, and every key's value grouped by where it came from (the
    keys an option set map to it in ``command_line``)."""
    values = effective_values(settings, nomad)
    sources = value_sources(settings, path, environ)
    sources.update({key: f"option {option}" for key, option in (command_line or {}).items()})
    groups = []
    for kind, title in _SOURCES:
        keys = [key for key, source in sources.items() if source.split()[0] == kind]
        if keys:
            shown = [f"{key}={values[key]}" + _named_by(sources[key]) for key in keys]
            groups.append(f"{title}: {', '.join(shown)}")
    environments = ", ".join(str(e.id) for e in settings.environments) or "none"
    where = path or "no configuration file"
    return (
        f"supervisor {__version__} starting with {where}; {'; '.join(groups)}; environments: {environments}"
    )


def _named_by(source: str) -> str:
    """The variable or option a value came from, in parentheses."""
    kind, _, name = source.partition(" ")
    return f" ({name})" if kind in ("env", "option") else ""


def changes(old: Settings, new: Settings) -> dict[str, tuple[str, str]]:
    """Each key whose value differs, with its old and new values (secrets as ``***``)."""
    before, after = effective_values(old), effective_values(new)
    found = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    if old.environments != new.environments:
        found["environments"] = (str(len(old.environments)), str(len(new.environments)))
    return found


class Reloader:
    """What SIGHUP does: load the configuration again, apply what may change at run time, and say
    what changed."""

    def __init__(
        self,
        load: Callable[[], Settings],
        settings: Settings,
        stream: LogStream,
        *,
        tls: ServerTls | None = None,
    ) -> None:
        self._load = load
        self._stream = stream
        self._tls = tls
        # The configuration in effect: the one started with, and the reloadable keys since.
        self.settings = settings

    def reload(self) -> dict[str, tuple[str, str]]:
        """Reload; the changes found (applied or not). A configuration that does not load changes
        nothing; the TLS certificate is read again all the same."""
        if self._tls is not None:
            self._tls.reload()
        try:
            loaded = self._load()
        except ConfigError as error:
            logger.error("SIGHUP: the configuration does not load, nothing changed: {}", error)
            return {}
        found = changes(self.settings, loaded)
        applied = {key: change for key, change in found.items() if key in RELOADABLE}
        waiting = {key: change for key, change in found.items() if key not in RELOADABLE}
        if applied:
            log = attrs.evolve(self.settings.log, level=loaded.log.level, format=loaded.log.format)
            self.settings = attrs.evolve(self.settings, log=log)
            self._stream.apply(self.settings.log)
            logger.info("SIGHUP: reloaded {}", _listed(applied), changed=sorted(applied))
        if waiting:
            logger.warning(
                "SIGHUP: changed, applied at the next start: {}", _listed(waiting), waiting=sorted(waiting)
            )
        if not found:
            logger.info("SIGHUP: the configuration is unchanged")
        return found


def _listed(found: Mapping[str, tuple[str, str]]) -> str:
    return ", ".join(f"{key} {old} -> {new}" for key, (old, new) in sorted(found.items()))
