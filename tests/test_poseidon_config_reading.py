"""Poseidon's configuration read as Poseidon reads it (``supervisor/core/poseidon_settings.py``):
yaml.v3's scalars and Go's field types, the keys Poseidon ignores, what it stops on, and its
``POSEIDON_*`` variables applied over the file.

Plain sync tests, no I/O but the fixtures; the expected values are yaml.v3 v3.0.1's and Go's
(``decode.go``, ``resolve.go``, ``strconv``), cited where they differ from PyYAML's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from supervisor.base.errors import ConfigError
from supervisor.core.poseidon_settings import (
    PoseidonSettings,
    read_poseidon_settings,
    resolve,
    variables,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXAMPLE = FIXTURES / "poseidon-configuration.example.yaml"
FULL = FIXTURES / "poseidon-configuration-full.yaml"


def read(text: str, environ: dict[str, str] | None = None) -> PoseidonSettings:
    return read_poseidon_settings(text, source="poseidon.yaml", environ=environ)


def refusal(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as refused:
        read(text, environ)
    message = str(refused.value)
    assert "\n" not in message, "one line"
    return message


# -- yaml.v3's plain scalars ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tag", "value"),
    [
        ("30_000", "int", 30000),  # the example file's memoryinterval
        ("0x10", "int", 16),
        ("0o17", "int", 15),
        ("0777", "int", 511),  # YAML 1.1's octal, which v3 still reads
        ("09", "float", 9.0),  # no octal, no int: the float pattern takes it
        ("-12", "int", -12),
        ("1e3", "float", 1000.0),
        (".5", "float", 0.5),
        ("1_0.5", "float", 10.5),
        ("9223372036854775808", "int", 2**63),  # past int64: ParseUint
        ("-9223372036854775809", "float", -9223372036854775809.0),
        ("true", "bool", True),
        ("FALSE", "bool", False),
        ("yes", "str", "yes"),  # YAML 1.1's boolean, a string in v3 (PyYAML says True)
        ("on", "str", "on"),
        ("~", "null", None),
        ("", "null", None),
        ("Null", "null", None),
        ("+", "str", "+"),
        ("2025-10-29", "str", "2025-10-29"),
        ("abc", "str", "abc"),
        ("1e400", "str", "1e400"),  # out of float64's range: Go's ParseFloat fails
    ],
)
def test_plain_scalars_resolve_as_yaml_v3_resolves_them(text: str, tag: str, value: Any) -> None:
    assert resolve(text) == (tag, value)


def test_infinities_and_nan_are_floats() -> None:
    assert resolve("-.inf") == ("float", -math.inf)
    tag, value = resolve(".NaN")
    assert tag == "float"
    assert math.isnan(value)


# -- Go's field types ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml", "key", "value"),
    [
        ("server:\n  token: 123456\n", "server.token", "123456"),  # a string field takes the text
        ("server:\n  token: 0x10ab\n", "server.token", "0x10ab"),
        ("server:\n  address: yes\n", "server.address", "yes"),
        ("nomad:\n  namespace: 'quoted'\n", "nomad.namespace", "quoted"),
        ("server:\n  port: 7_300\n", "server.port", 7300),
        ("server:\n  port: 7300.9\n", "server.port", 7300),  # Go's int(float) cuts it
        ("server:\n  port: 0x1c84\n", "server.port", 7300),
        ("server:\n  interactivestderr: no\n", "server.interactivestderr", False),
        ("server:\n  interactivestderr: On\n", "server.interactivestderr", True),
        ("server:\n  interactivestderr: 'n'\n", "server.interactivestderr", False),
        ("server:\n  alert:\n    prewarmingpoolthreshold: 1\n", "server.alert.prewarmingpoolthreshold", 1.0),
        ("profiling:\n  memoryinterval: 30_000\n", "profiling.memoryinterval", 30000),
        ("aws:\n  functions: [a, 12, 'b c', ~]\n", "aws.functions", ("a", "12", "b c")),  # null left out
        ("aws:\n  functions:\n", "aws.functions", ()),
        ("nomad:\n  network:\n    mbits: 10\n", "nomad.network.mbits", 10),
        ("nomad:\n  network:\n    dns: ~\n", "nomad.network.dns", None),
    ],
)
def test_each_value_is_decoded_by_its_go_type(yaml: str, key: str, value: Any) -> None:
    settings = read(yaml)
    assert settings[key] == value
    assert settings.origin(key) == f"line {yaml.count(chr(10), 0, yaml.index(key.rsplit('.', 1)[1])) + 1}"


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("server:\n  port: abc\n", "poseidon.yaml line 2: server.port: 'abc' is not an integer"),
        ("server:\n  port: '7200'\n", "server.port: '7200' is not an integer"),
        ("server:\n  port: true\n", "server.port: 'true' is not an integer"),
        ("server:\n  tls:\n    active: 'true'\n", "server.tls.active: 'true' is not a boolean"),
        ("server:\n  tls:\n    active: 1\n", "server.tls.active: '1' is not a boolean"),
        ("server:\n  alert:\n    prewarmingpoolreloadtimeout: -1\n", "is not an integer of 0 or more"),
        ("server:\n  alert:\n    prewarmingpoolthreshold: half\n", "'half' is not a number"),
        ("server:\n  token: [a, b]\n", "server.token: a list is not a string"),
        ("server: 7200\n", "poseidon.yaml line 1: server: '7200' is not a mapping of keys"),
        ("nomad:\n  tls: on\n", "nomad.tls: 'on' is not a mapping of keys"),
        ("aws:\n  functions: java11Exec\n", "aws.functions: 'java11Exec' is not a list of strings"),
        ("aws:\n  functions: [[a]]\n", "aws.functions[0]: a list is not a string"),
        ("sentry:\n  tags: [a]\n", "sentry.tags: a list is not a mapping"),
        ("sentry:\n  beforesend: drop\n", "sentry.beforesend: Poseidon cannot take a value here"),
        ("- server\n", "poseidon.yaml line 1: the file: a list is not a mapping of keys"),
        ("just text\n", "the file: 'just text' is not a mapping of keys"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_as_poseidon_refuses_it(yaml: str, message: str) -> None:
    assert message in refusal(yaml)


def test_what_is_not_yaml_is_one_line_naming_where() -> None:
    assert refusal("server:\n  port: [7200\n") == (
        "poseidon.yaml line 3: not YAML: expected ',' or ']', but got '<stream end>'"
    )
    assert refusal("server:\n\tport: 1\n").startswith("poseidon.yaml line 2: not YAML: ")
    assert refusal("a: *nowhere\n") == "poseidon.yaml line 1: not YAML: found undefined alias 'nowhere'"


def test_a_key_given_twice_is_refused_as_yaml_v3s_unique_keys_refuse_it() -> None:
    assert refusal("server:\n  port: 1\n  port: 2\n") == (
        "poseidon.yaml line 3: server.port is given twice (Poseidon stops on it too)"
    )


def test_null_leaves_a_value_as_it_was_but_empties_a_list() -> None:
    settings = read("server:\n  port:\n  address: ~\nnomad:\nsentry:\n  ignoreerrors: null\n")
    assert settings["server.port"] == 7200
    assert settings["server.address"] == "127.0.0.1"
    assert not settings.given("server.port"), "nothing was set"
    assert settings["sentry.ignoreerrors"] == ()
    assert settings.given("sentry.ignoreerrors")


def test_an_empty_file_or_one_of_comments_is_poseidons_defaults() -> None:
    for text in ("", "# nothing\n", "---\n"):
        settings = read(text)
        assert settings.origins == {}
        assert settings.notes == ()
        assert settings["nomad.address"] == "127.0.0.1"
        assert settings["nomad.port"] == 4646
        assert settings["server.alert.prewarmingpoolthreshold"] == 0.0, "Poseidon's code default: off"
        assert settings["logger.level"] == "INFO"
        assert settings["nomad.namespace"] == "default"
        assert settings["server.loggingfiltertoken"] is None, "random at each start"
        assert settings.origin("server.port") == "Poseidon's default"


def test_only_the_first_document_is_read() -> None:
    assert read("server:\n  port: 1\n---\nserver:\n  port: 2\n")["server.port"] == 1


def test_unknown_keys_are_noted_with_their_line_and_ignored() -> None:
    settings = read("server:\n  prot: 7300\n  tls:\n    actvie: true\nServer:\n  port: 1\nmetrics: {}\n")
    assert settings.notes == (
        "poseidon.yaml line 2: server.prot: Poseidon has no such key and ignores it; not translated",
        "poseidon.yaml line 4: server.tls.actvie: Poseidon has no such key and ignores it; not translated",
        "poseidon.yaml line 5: Server: Poseidon has no such key and ignores it; not translated",
        "poseidon.yaml line 7: metrics: Poseidon has no such key and ignores it; not translated",
    )
    assert settings["server.port"] == 7200, "keys are matched case by case, as yaml.v3 matches them"
    assert settings.origins == {}


def test_a_merge_key_merges_under_the_mappings_own_keys() -> None:
    text = (
        "tls: &tls\n  active: true\n  certfile: /a.crt\n  keyfile: /a.key\n"
        "other: &other\n  keyfile: /other.key\n  cafile: /ca.crt\n"
        "server:\n  tls:\n    <<: [*tls, *other]\n    certfile: /mine.crt\n"
    )
    settings = read(text)
    assert settings["server.tls.active"] is True
    assert settings["server.tls.certfile"] == "/mine.crt", "the mapping's own key wins"
    assert settings["server.tls.keyfile"] == "/a.key", "the first merged mapping wins over the next"
    assert settings["server.tls.cafile"] == "/ca.crt"


# -- the fixtures -----------------------------------------------------------------------------------


def test_poseidons_example_file_is_read_without_a_note() -> None:
    settings = read_poseidon_settings(EXAMPLE.read_text(), source=str(EXAMPLE))
    assert settings.notes == ()
    assert settings["nomad.network.mode"] == "cni/secure-bridge"
    assert settings["server.alert.prewarmingpoolthreshold"] == 0.5
    assert settings["server.alert.prewarmingpoolreloadtimeout"] == 300
    assert settings["profiling.memoryinterval"] == 30000
    assert settings["profiling.memorythreshold"] == 1000
    assert settings["logger.level"] == "DEBUG"
    assert settings["nomad.disableforcepull"] is True
    assert not settings.given("server.token"), "commented out in the example"


def test_the_full_file_sets_every_value_that_a_file_can_set() -> None:
    settings = read_poseidon_settings(FULL.read_text(), source=str(FULL))
    unset = [
        key
        for key in settings.values
        if not settings.given(key) and not key.startswith(("sentry.before", "sentry.http", "sentry.ca"))
    ]
    # Sentry's hooks, transports and writers take no value from a file.
    assert unset == [
        "sentry.tracessampler",
        "sentry.integrations",
        "sentry.debugwriter",
        "sentry.transport",
    ]
    assert settings["nomad.network.dns.options"] == ("ndots:2",)
    assert settings["sentry.tags"] == {"site": "potsdam"}
    assert settings["nomad.network.reservedports"] == [{"label": "http", "static": 8080}]
    assert settings.notes == ()


# -- the variables --------------------------------------------------------------------------------


def test_the_variables_are_named_by_the_go_fields_as_poseidon_names_them() -> None:
    names = variables()
    assert names["POSEIDON_SERVER_TLS_CAFILE"] == "server.tls.cafile"
    assert names["POSEIDON_SERVER_ALERT_PREWARMINGPOOLTHRESHOLD"] == "server.alert.prewarmingpoolthreshold"
    assert names["POSEIDON_NOMAD_NETWORK_MODE"] == "nomad.network.mode"
    assert names["POSEIDON_SENTRY_DSN"] == "sentry.dsn"
    assert names["POSEIDON_INFLUXDB_URL"] == "influxdb.url"
    assert "POSEIDON_NOMAD_NETWORK_DNS_SERVERS" not in names, "a pointer's fields are not walked"
    assert names["POSEIDON_NOMAD_NETWORK_DNS"] == "nomad.network.dns"


def test_variables_are_applied_over_the_file_as_poseidon_applies_them() -> None:
    environ = {
        "POSEIDON_SERVER_PORT": "7400",
        "POSEIDON_SERVER_TOKEN": "from-the-environment",
        "POSEIDON_NOMAD_TLS_ACTIVE": "T",
        "POSEIDON_NOMAD_NETWORK_MODE": "host",
        "POSEIDON_AWS_FUNCTIONS": '"go118Exec  java11Exec"',
        "HOME": "/root",
    }
    settings = read("server:\n  port: 7300\naws:\n  functions: [python]\n", environ)
    assert settings["server.port"] == 7400
    assert settings.origin("server.port") == "POSEIDON_SERVER_PORT"
    assert settings["server.token"] == "from-the-environment"
    assert settings["nomad.tls.active"] is True, "Go's ParseBool takes T"
    assert settings["nomad.network.mode"] == "host"
    assert settings["aws.functions"] == ("python", "go118Exec", "java11Exec"), "split and appended"
    assert settings.notes == ()


def test_without_an_environment_no_variable_is_read() -> None:
    assert read("", None)["server.port"] == 7200


@pytest.mark.parametrize(
    ("variable", "text", "note"),
    [
        ("POSEIDON_SERVER_PORT", "7_300", "Poseidon ignores it (server.port: not an integer); not applied"),
        ("POSEIDON_SERVER_PORT", "0x10", "not an integer"),
        ("POSEIDON_SERVER_INTERACTIVESTDERR", "yes", "(server.interactivestderr: not a boolean)"),
        (
            "POSEIDON_SERVER_ALERT_PREWARMINGPOOLTHRESHOLD",
            "0.5",
            "(server.alert.prewarmingpoolthreshold: a number cannot be set from a variable)",
        ),
        ("POSEIDON_SERVER_ALERT_PREWARMINGPOOLRELOADTIMEOUT", "300", "cannot be set from a variable"),
        ("POSEIDON_NOMAD_NETWORK_DNS", "1.1.1.1", "(nomad.network.dns: a mapping or null cannot be set"),
        ("POSEIDON_SENTRY_TAGS", "a", "(sentry.tags: a mapping cannot be set from a variable)"),
        ("POSEIDON_NOMAD_ADRESS", "x", "Poseidon reads no such variable; not applied"),
    ],
)
def test_a_variable_poseidon_cannot_apply_is_noted_and_not_applied(
    variable: str, text: str, note: str
) -> None:
    settings = read("server:\n  port: 7300\n", {variable: text})
    assert len(settings.notes) == 1
    assert settings.notes[0].startswith(f"{variable}: ")
    assert note in settings.notes[0]
    assert settings["server.port"] == 7300
    assert settings["server.alert.prewarmingpoolthreshold"] == 0.0


@pytest.mark.parametrize(
    "variable", ["POSEIDON_NOMAD_NETWORK_RESERVEDPORTS", "POSEIDON_SENTRY_TRACEIGNORESTATUSCODES"]
)
def test_a_list_of_structs_from_a_variable_is_refused_since_poseidon_panics(variable: str) -> None:
    assert refusal("", {variable: "80"}).startswith(f"{variable}: Poseidon panics on it")
