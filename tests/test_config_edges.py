"""The configuration's refusals at their edges: an unknown key or section with no close match lists
the known ones; Poseidon's settings read with their variables (a lone quote, an empty quoted list,
an unquoted one, a variable ignored before one applied) and a value of the wrong shape."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from supervisor.base.errors import ConfigError
from supervisor.core.config import SECTIONS, ServerSettings, load_settings
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
