"""The configuration's refusals at their edges: an unknown key or section with no close match lists
the known ones; Poseidon's settings read with their variables (a lone quote, an empty quoted list,
an unquoted one, a variable ignored before one applied) and a value of the wrong shape."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs
import pytest

from supervisor.base.errors import ConfigError
from supervisor.core.config import SECTIONS, ServerSettings, load_settings
from supervisor.core.config_rules import (
    Rule,
    absolute_path,
    at_least,
    between,
    described,
    one_of,
    required,
    secret_problems,
    setting,
    up_to,
)
from supervisor.core.poseidon_config import translate
from supervisor.core.poseidon_settings import read_poseidon_settings, resolve


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_an_unknown_key_like_none_known_lists_the_known_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, "[server]\nzzzzzzzz = 1\n"), {})
    known = ", ".join(attrs.fields_dict(ServerSettings))
    assert str(refused.value) == f"server.zzzzzzzz: unknown key (known: {known})"


def test_an_unknown_section_like_none_known_lists_the_known_sections(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, "[qqqqqqqq]\n"), {})
    known = ", ".join([*SECTIONS, "environments"])
    assert str(refused.value) == f"qqqqqqqq: unknown section (known: {known})"


def test_a_lone_quote_in_a_list_variable_is_refused_since_poseidon_panics() -> None:
    with pytest.raises(ConfigError) as refused:
        read_poseidon_settings("", source="f.yaml", environ={"POSEIDON_AWS_FUNCTIONS": '"'})
    assert str(refused.value) == "POSEIDON_AWS_FUNCTIONS: a lone '\"' makes Poseidon panic; unset it"


@pytest.mark.parametrize(
    ("text", "functions"),
    [
        ('""', ()),
        ('"a"', ("a",)),
        ("go118Exec java11Exec", ("go118Exec", "java11Exec")),
        ('"go118Exec', ('"go118Exec',)),
    ],
)
def test_a_list_variable_loses_one_pair_of_surrounding_quotes_only(
    text: str, functions: tuple[str, ...]
) -> None:
    settings = read_poseidon_settings("", source="f.yaml", environ={"POSEIDON_AWS_FUNCTIONS": text})
    assert settings["aws.functions"] == functions


def test_a_variable_poseidon_ignores_does_not_stop_the_ones_after_it() -> None:
    environ = {"POSEIDON_SERVER_PORT": "0x10", "POSEIDON_NOMAD_NETWORK_MODE": "host"}
    settings = read_poseidon_settings("", source="f.yaml", environ=environ)
    assert settings["nomad.network.mode"] == "host"
    assert settings.notes == (
        "POSEIDON_SERVER_PORT: Poseidon ignores it (server.port: not an integer); not applied",
    )


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("server:\n  port:\n    a: 1\n", "line 3: server.port: a mapping"),
        ("server:\n  port: [1]\n", "line 2: server.port: a list"),
    ],
)
def test_a_mapping_or_a_list_where_a_number_goes_is_named_as_such(text: str, shown: str) -> None:
    with pytest.raises(ConfigError) as refused:
        read_poseidon_settings(text, source="f.yaml")
    assert str(refused.value) == f"f.yaml {shown} is not an integer (Poseidon stops on it too)"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("nomad:\n  network:\n    dns: 5\n", "nomad.network.dns: '5' is not a mapping or null"),
        ("nomad:\n  network:\n    mbits: x\n", "nomad.network.mbits: 'x' is not an integer"),
    ],
)
def test_a_pointer_s_wrong_value_is_named_by_its_path(text: str, shown: str) -> None:
    with pytest.raises(ConfigError) as refused:
        read_poseidon_settings(text, source="f.yaml")
    assert str(refused.value) == f"f.yaml line 3: {shown} (Poseidon stops on it too)"


@pytest.mark.parametrize(
    ("text", "resolved"),
    [
        ("0", ("int", 0)),
        ("07", ("int", 7)),
        ("0b101", ("int", 5)),
        ("0B101", ("int", 5)),
        ("-0x1f", ("int", -31)),
        ("+7", ("int", 7)),
        ("X10", ("str", "X10")),
    ],
)
def test_plain_integers_resolve_by_their_prefix_as_yaml_v3_resolves_them(
    text: str, resolved: tuple[str, object]
) -> None:
    assert resolve(text) == resolved


# -- the rules a setting takes, declared at test time: the settings' classes declare theirs when the
# package is imported, before a mutation run switches a mutant on, so only a class declared inside
# a test runs them where a mutant can be seen.


LONG = Rule("at least 16 characters", lambda v: isinstance(v, str) and len(v) >= 16)


def declared_section() -> type[Any]:
    """A section declared as the settings' classes are, but at test time (see above)."""

    @attrs.frozen
    class Section:
        """A section declared as the settings' classes are."""

        port: int = setting(7200, "The port.", between(1, 65535))
        timeout: float = setting(2.5, "How long to wait.", up_to(60), unit="seconds")
        workers: int = setting(1, "How many.", at_least(1))
        ports: tuple[int, ...] = setting((80,), "The ports.", between(1, 65535), each=True)
        level: str = setting("INFO", "The level.", one_of("INFO", "DEBUG", case_sensitive=False))
        root: str = setting("/", "The root.", absolute_path())
        token: str = setting("", "The token.", LONG, secret=True)
        plain: str = setting("x", "No rule.")

    return Section


def refused(**values: object) -> str:
    with pytest.raises(ConfigError) as raised:
        declared_section()(**values)
    return str(raised.value)


def test_a_section_declared_within_its_rules_is_made() -> None:
    section = declared_section()(
        port=65535, timeout=60, workers=1, ports=(1, 65535), level="debug", root="/srv"
    )
    assert (section.port, section.timeout, section.level) == (65535, 60, "debug")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"port": 0}, "port: must be 1 to 65535, got 0"),
        ({"port": 65536}, "port: must be 1 to 65535, got 65536"),
        ({"port": True}, "port: must be 1 to 65535, got True"),
        ({"timeout": 0}, "timeout: must be positive, up to 60, got 0"),
        ({"timeout": 60.5}, "timeout: must be positive, up to 60, got 60.5"),
        ({"timeout": math.inf}, "timeout: must be positive, up to 60, got inf"),
        ({"workers": 0}, "workers: must be 1 or more, got 0"),
        ({"ports": (80, 0)}, "ports: must be 1 to 65535, got 0"),
        ({"level": "TRACE"}, "level: 'TRACE' is not one of INFO, DEBUG"),
        ({"root": "srv"}, "root: must be an absolute path, got 'srv'"),
        ({"root": 5}, "root: must be an absolute path, got 5"),
    ],
)
def test_a_value_outside_a_declared_rule_is_refused_naming_the_key_and_the_rule(
    values: dict[str, object], message: str
) -> None:
    assert refused(**values) == message


def test_a_declared_secret_is_not_checked_when_made_and_never_shown() -> None:
    section = declared_section()(token="short")
    assert list(secret_problems("server", section)) == [
        "server.token: a token of 5 characters is too short to be secret; must be at least 16 characters"
    ]
    assert list(secret_problems("server", declared_section()(token="x" * 16))) == []


def test_what_each_declared_setting_takes_in_words() -> None:
    fields = attrs.fields_dict(declared_section())
    assert described(fields["timeout"]).takes == "seconds, positive, up to 60"
    assert described(fields["ports"]).takes == "each 1 to 65535"
    assert described(fields["plain"]).takes == ""
    assert described(fields["port"]).comment == "The port."
    assert described(fields["token"]).secret
    assert not described(fields["port"]).secret
    assert not described(fields["port"]).each


def test_rules_read_their_bounds_as_written() -> None:
    assert between(0.5, 2).text == "0.5 to 2"
    assert up_to(1.5).text == "positive, up to 1.5"
    assert at_least(3).text == "3 or more"
    assert between(1, 10).test(1)
    assert between(1, 10).test(10)
    assert not between(1, 10).test(0.99)
    assert up_to(10).test(10)
    assert not up_to(10).test(0)
    assert at_least(1).test(1)
    assert not at_least(1).test(math.nan)


def test_a_declared_required_setting_has_no_default_and_keeps_its_example() -> None:
    @attrs.frozen
    class Entry:
        """An entry declared as an environment's."""

        image: str = required("python:3.12", "The image.", absolute_path())
        ports: tuple[int, ...] = required((8080,), "The ports.", between(1, 65535), each=True)

    with pytest.raises(TypeError):
        Entry()
    with pytest.raises(ConfigError, match=r"^ports: must be 1 to 65535, got 0$"):
        Entry(image="/x", ports=(0,))
    with pytest.raises(ConfigError, match=r"^image: must be an absolute path"):
        Entry(image="x", ports=())
    fields = attrs.fields_dict(Entry)
    assert described(fields["image"]).example == "python:3.12"
    assert described(fields["ports"]).each
    assert described(fields["image"]).rule is not None


def test_a_value_a_rule_refuses_names_the_variable_it_came_from_and_no_other(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(None, {"SUPERVISOR_ADMISSION_WAIT_TIMEOUT": "-1"})
    assert str(refused.value) == (
        "admission.wait_timeout: must be 0 or more, got -1 (from SUPERVISOR_ADMISSION_WAIT_TIMEOUT)"
    )
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, "[admission]\nwait_timeout = -1\n"), {})
    assert str(refused.value) == "admission.wait_timeout: must be 0 or more, got -1"


def test_a_value_of_the_wrong_type_names_the_type_and_where_it_came_from(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, "[server]\nport = 1.5\n"), {})
    assert str(refused.value) == "server.port: 1.5 is not a valid int"
    with pytest.raises(ConfigError) as refused:
        load_settings(None, {"SUPERVISOR_SERVER_PORT": "x"})
    assert str(refused.value) == "SUPERVISOR_SERVER_PORT: 'x' is not a valid int"


# -- Poseidon's configuration translated: the whole text an operator reads and installs, and the notes
# on stderr, for the two files of Poseidon's the tests keep. After a deliberate change of wording,
# write them anew with translate() and read the difference.

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("name", ["poseidon-configuration.example", "poseidon-configuration-full"])
def test_poseidon_s_files_translate_word_for_word_as_kept(name: str) -> None:
    source = f"{name}.yaml"
    translation = translate(
        read_poseidon_settings((FIXTURES / source).read_text(), source=source), source=source
    )
    assert translation.text == (FIXTURES / f"{name}.translated.toml").read_text()
    assert list(translation.notes) == (FIXTURES / f"{name}.notes.txt").read_text().splitlines()


def test_a_refused_value_holding_a_colon_still_names_its_variable() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(None, {"SUPERVISOR_LOG_LEVEL": "a:b"})
    assert str(refused.value) == (
        "log.level: 'a:b' is not one of TRACE, DEBUG, INFO, SUCCESS, WARNING, ERROR, CRITICAL "
        "(from SUPERVISOR_LOG_LEVEL)"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[admission]\nwait_timeout = true\n", "admission.wait_timeout: True is not a valid float"),
        ("[nomad]\naddress = [1]\n", "nomad.address: [1] is not a valid list of strings"),
    ],
)
def test_a_boolean_where_a_number_goes_and_a_number_among_strings_are_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(write(tmp_path, text), {})
    assert str(refused.value) == message


def test_poseidon_s_zeros_an_empty_network_mode_and_another_formatter_are_said_as_they_run() -> None:
    text = (
        "server:\n  alert:\n    prewarmingpoolthreshold: 0\n    prewarmingpoolreloadtimeout: 0\n"
        'nomad:\n  network:\n    mode: ""\nlogger:\n  formatter: Custom\n'
    )
    lines = translate(read_poseidon_settings(text, source="p.yaml"), source="p.yaml").text.splitlines()
    assert (
        'mode = "host"                 # nomad.network.mode (line 7); Nomad takes an empty mode as host'
        in lines
    )
    assert (
        "prewarming_pool_threshold = 0  # server.alert.prewarmingpoolthreshold (line 3); 0: never in warning"
        in lines
    )
    assert (
        "reload_timeout = 0            # server.alert.prewarmingpoolreloadtimeout (line 4); 0: never reloaded"
        in lines
    )
    assert (
        'format = "text"               # logger.formatter (line 9); Poseidon logged text for any other'
        in lines
    )
