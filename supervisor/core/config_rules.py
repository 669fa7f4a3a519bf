"""What a setting takes: its rule, and its line of documentation.

A setting is an attrs field made by ``setting()`` (or ``required()`` for an environment's keys, which
have no default). Its metadata holds the comment that ``supervisor config example`` writes beside
it, its unit and its ``Rule``. The rule is the field's validator, so a section out of bounds cannot
be made at all, from a file, the environment or code; a secret's rule (a token's length) is checked
when the configuration loads instead (``secret_problems``), and its value is never shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, Final, final

import attrs
from attrs import frozen

from ..base.errors import ConfigError

__all__ = [
    "NOT_EMPTY",
    "POSITIVE",
    "Rule",
    "Setting",
    "absolute_path",
    "at_least",
    "between",
    "described",
    "one_of",
    "required",
    "secret_problems",
    "setting",
    "up_to",
]

_KEY: Final = "supervisor.setting"


@final
@frozen
class Rule:
    """What a setting takes, in words (``text``) and as a test."""

    text: str
    test: Callable[[Any], bool]
    # How a refusal reads, after the key: ``{text}`` and ``{value}`` are filled in.
    says: str = "must be {text}, got {value}"

    def check(self, name: str, value: Any) -> None:
        """ConfigError naming ``name`` unless ``value`` passes."""
        if not self.test(value):
            raise ConfigError(f"{name}: " + self.says.format(text=self.text, value=_shown(value)))


@final
@frozen
class Setting:
    """What the example file says of a setting: its comment, unit and rule, whether the rule holds
    for each item of a list, whether the value is a secret, and the example of a required one."""

    comment: str
    rule: Rule | None
    unit: str = ""
    each: bool = False
    secret: bool = False
    example: Any = None

    @property
    def takes(self) -> str:
        """What the setting takes, in words: ``seconds, positive``, ``each 1 to 65535``."""
        text = self.rule.text if self.rule else ""
        if text and self.each:
            text = f"each {text}"
        return ", ".join(part for part in (self.unit, text) if part)


def described(attribute: attrs.Attribute[Any]) -> Setting:
    """The description of a setting made by ``setting()`` or ``required()``."""
    found = attribute.metadata.get(_KEY)
    return found if isinstance(found, Setting) else Setting("", None)


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value) if isinstance(value, str) else str(value)


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _text(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def between(low: float, high: float) -> Rule:
    """From ``low`` to ``high``, both included."""
    return Rule(f"{_text(low)} to {_text(high)}", lambda v: _number(v) and low <= v <= high)


def at_least(low: float) -> Rule:
    """``low`` or more (and finite)."""
    return Rule(f"{_text(low)} or more", lambda v: _number(v) and v >= low)


def up_to(high: float) -> Rule:
    """Positive, and ``high`` at most."""
    return Rule(f"positive, up to {_text(high)}", lambda v: _number(v) and 0 < v <= high)


POSITIVE: Final = Rule("positive", lambda v: _number(v) and v > 0)
NOT_EMPTY: Final = Rule("not empty", lambda v: bool(v and str(v).strip()))


def one_of(*choices: str, case_sensitive: bool = True) -> Rule:
    """One of ``choices`` (in any case unless ``case_sensitive``)."""
    folded = choices if case_sensitive else tuple(c.upper() for c in choices)
    return Rule(
        "one of " + ", ".join(choices),
        lambda v: isinstance(v, str) and (v if case_sensitive else v.upper()) in folded,
        says="{value} is not {text}",
    )


def absolute_path() -> Rule:
    """An absolute path, as a runner's container sees it."""
    return Rule("an absolute path", lambda v: isinstance(v, str) and v.startswith("/"))


def _validator(rule: Rule, *, each: bool) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def validate(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        for item in value if each else (value,):
            rule.check(attribute.name, item)

    return validate


def setting(
    default: Any,
    comment: str,
    rule: Rule | None = None,
    *,
    unit: str = "",
    each: bool = False,
    secret: bool = False,
) -> Any:
    """A setting with its default, the comment that documents it, its unit and its rule (``each``:
    the rule of each item of a list; ``secret``: checked at load, and never shown)."""
    description = Setting(comment, rule, unit, each, secret)
    validator = _validator(rule, each=each) if rule is not None and not secret else None
    return attrs.field(default=default, validator=validator, metadata={_KEY: description})


def required(example: Any, comment: str, rule: Rule | None = None, *, each: bool = False) -> Any:
    """A setting without a default (an environment's); ``example`` is what the example shows."""
    description = Setting(comment, rule, each=each, example=example)
    validator = _validator(rule, each=each) if rule is not None else None
    return attrs.field(validator=validator, metadata={_KEY: description})


def secret_problems(section: str, values: Any) -> Iterator[str]:
    """For each secret of a section (an attrs instance) its rule refuses, a line that names the key
    and gives the length, never the value."""
    for attribute in attrs.fields(type(values)):
        description = described(attribute)
        value = getattr(values, attribute.name)
        if description.secret and description.rule is not None and not description.rule.test(value):
            yield (
                f"{section}.{attribute.name}: a token of {len(value)} characters is too short to be "
                f"secret; must be {description.rule.text}"
            )
