"""``supervisor config example``: a complete configuration file, every key at its default with its
comment and, in brackets, what it takes; written from the settings' classes (``config_schema``), so
it cannot drift from what the loader accepts. The file loads as the defaults do.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any, Final

import attrs

from .config_rules import described
from .config_schema import EnvironmentEntry, Settings

__all__ = ["example_config", "toml_value"]

# Where the comments begin, and the width they wrap at.
_COMMENT_COLUMN: Final = 26
_WIDTH: Final = 100
# Joins the words of a bracket, so that wrapping never splits it.
_NO_BREAK: Final = "\u00a0"
_HEADER: Final = """\
# nomad-runner-supervisor: every key at its default, with what it takes in [brackets].
# Each key can also be set by SUPERVISOR_<SECTION>_<KEY> (lists comma-separated, booleans true or
# false): SUPERVISOR_SERVER_TOKEN sets server.token."""


def toml_value(value: Any) -> str:
    """``value`` written as TOML: whole floats as integers, large integers with ``_``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _comment(attribute: attrs.Attribute[Any]) -> str:
    """The key's comment, and what it takes in brackets (kept on one line: its spaces do not break)."""
    description = described(attribute)
    bracket = f"[{description.takes}]".replace(" ", _NO_BREAK) if description.takes else ""
    return " ".join(part for part in (description.comment, bracket) if part)


def _line(code: str, comment: str, prefix: str = "") -> Iterator[str]:
    """``code`` with ``comment`` beside it, wrapped onto comment lines under the first."""
    code = prefix + code
    if not comment:
        yield code
        return
    column = max(_COMMENT_COLUMN, len(code) + 2)
    wrapped = textwrap.wrap(
        comment, width=_WIDTH - column - 2, break_on_hyphens=False, break_long_words=False
    ) or [""]
    wrapped = [line.replace(_NO_BREAK, " ") for line in wrapped]
    yield f"{code:<{column}}# {wrapped[0]}"
    yield from (f"{prefix:<{column}}# {more}" for more in wrapped[1:])


def _section_comment(cls: type[Any]) -> str:
    """The section's docstring, after its ``[name]``: what the section is about."""
    text = " ".join((cls.__doc__ or "").split()).rstrip(".")
    return text.partition(": ")[2] or text


def example_config() -> str:
    """The example file's text: every section and key, and an ``[[environments]]`` entry, commented
    out since none is declared by default."""
    lines = [_HEADER]
    defaults = Settings()
    for section in attrs.fields(Settings):
        if section.name == "environments":
            continue
        cls = type(getattr(defaults, section.name))
        lines += ["", *_line(f"[{section.metadata.get('section', section.name)}]", _section_comment(cls))]
        for key in attrs.fields(cls):
            value = getattr(getattr(defaults, section.name), key.name)
            lines += _line(f"{key.name} = {toml_value(value)}", _comment(key))
    lines += ["", *_line("[[environments]]", _section_comment(EnvironmentEntry), prefix="# ")]
    for key in attrs.fields(EnvironmentEntry):
        lines += _line(f"{key.name} = {toml_value(described(key).example)}", _comment(key), prefix="# ")
    return "\n".join(lines) + "\n"
