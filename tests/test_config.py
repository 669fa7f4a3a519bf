"""The configuration: TOML, SUPERVISOR_<SECTION>_<KEY> overrides, Nomad's variables, clear errors;
every key's rule, and the example file written from the same classes."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from supervisor.base.errors import ConfigError
from supervisor.core.config import SECTIONS, ServerSettings, Settings, load_settings, variable_name
from supervisor.core.config_example import example_config
from supervisor.core.config_rules import described

CONFIGURATION_DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

FILE = """
[server]
address = "0.0.0.0"
port = 7300
token = "from-file"

[nomad]
address = ["https://nomad-1:4646", "https://nomad-2:4646"]
namespace = "poseidon"

[admission]
wait_timeout = 2

[[environments]]
id = 10
image = "openhpi/co_execenv_python:3.8"
prewarming_pool_size = 5
cpu_limit = 20
memory_limit = 512
network_access = false
exposed_ports = []
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "supervisor.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file() -> None:
    settings = load_settings(None, {})
    assert (settings.server.address, settings.server.port, settings.server.token) == ("127.0.0.1", 7200, "")
    assert settings.admission.wait_timeout == 5.0
    assert settings.alert.prewarming_pool_threshold == 0.5
    assert settings.nomad_settings({}) is None, "no address anywhere: the embedded cluster"


def test_file_and_environment_overrides(tmp_path: Path) -> None:
    environ = {
        "SUPERVISOR_SERVER_TOKEN": "s3cret",
        "SUPERVISOR_ALERT_PREWARMING_POOL_THRESHOLD": "0.25",
        "SUPERVISOR_ADMISSION_WAIT_TIMEOUT": "1.5",
        "NOMAD_TOKEN": "nomad-token",
    }
    settings = load_settings(write(tmp_path, FILE), environ)
    assert settings.server.port == 7300
    assert settings.server.token == "s3cret", "the environment wins"
    assert settings.alert.prewarming_pool_threshold == 0.25, "floats too"
    assert settings.admission.wait_timeout == 1.5
    assert settings.environments[0].id == 10
    assert settings.environments[0].prewarming_pool_size == 5
    nomad = settings.nomad_settings(environ)
    assert nomad is not None
    assert nomad.addresses == ("https://nomad-1:4646", "https://nomad-2:4646")
    assert nomad.namespace == "poseidon"
    assert nomad.token == "nomad-token", "Nomad's own variables are honoured"


def test_nomad_addr_alone_selects_a_real_cluster() -> None:
    settings = load_settings(None, {"SUPERVISOR_CONFIG": ""})
    nomad = settings.nomad_settings({"NOMAD_ADDR": "http://10.0.0.5:4646"})
    assert nomad is not None
    assert nomad.addresses == ("http://10.0.0.5:4646",)


def test_config_file_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = 7400\n")
    assert load_settings(None, {"SUPERVISOR_CONFIG": str(path)}).server.port == 7400


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        ("[server]\nport = 'high'\n", {}, "server.port: 'high' is not a valid int"),
        ("[server]\nport = 99999\n", {}, "server.port: must be 0 to 65535, got 99999"),
        ("[server]\nprot = 1\n", {}, "server.prot: unknown key"),
        ("[serverz]\n", {}, "serverz: unknown section"),
        ("[alert]\nprewarming_pool_threshold = 2\n", {}, "alert.prewarming_pool_threshold"),
        ("", {"SUPERVISOR_ADMISSION_WAIT_TIMEOUT": "soon"}, "SUPERVISOR_ADMISSION_WAIT_TIMEOUT: 'soon'"),
        ("[[environments]]\nid = 1\n", {}, "image is required"),
        ("[server\n", {}, "config file"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_settings(write(tmp_path, text), environ)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_settings(tmp_path / "absent.toml", {})


def test_timings_that_were_module_constants_are_settings(tmp_path: Path) -> None:
    config = tmp_path / "supervisor.toml"
    config.write_text(
        "[health]\nstream_down_grace = 90\n[alert]\ncheck_interval = 2.5\n"
        "[nomad]\nexec_connect_timeout = 3\n[admission]\nagent_retry_interval = 0.25\n"
    )
    settings = load_settings(config, {"SUPERVISOR_HEALTH_NOMAD_CHECK_TIMEOUT": "4"})
    assert settings.health.stream_down_grace == 90.0
    assert settings.health.nomad_check_timeout == 4.0
    assert settings.alert.check_interval == 2.5
    assert settings.admission.agent_retry_interval == 0.25
    nomad = settings.nomad_settings({"NOMAD_ADDR": "http://127.0.0.1:4646"})
    assert nomad is not None
    assert nomad.exec_connect_timeout == 3.0
    with pytest.raises(ConfigError, match=r"alert\.check_interval: must be positive, got 0"):
        load_settings(None, {"SUPERVISOR_ALERT_CHECK_INTERVAL": "0"})


def test_max_starting_is_a_count_of_at_least_one() -> None:
    assert load_settings(None, {}).factory.max_starting == 10
    assert load_settings(None, {"SUPERVISOR_FACTORY_MAX_STARTING": "25"}).factory.max_starting == 25
    with pytest.raises(
        ConfigError,
        match=r"factory\.max_starting: must be 1 or more, got 0 \(from SUPERVISOR_FACTORY_MAX_STARTING\)",
    ):
        load_settings(None, {"SUPERVISOR_FACTORY_MAX_STARTING": "0"})


def test_ha_is_off_by_default_and_turned_on_by_the_environment() -> None:
    assert not load_settings(None, {}).ha.enabled
    settings = load_settings(None, {"SUPERVISOR_HA_ENABLED": "true", "SUPERVISOR_HA_TTL": "12"})
    assert settings.ha.enabled
    assert settings.ha.ttl == 12.0


def test_an_ha_ttl_nomad_would_refuse_stops_startup_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"ha\.ttl: must be 10 to 86400, got 5"):
        load_settings(None, {"SUPERVISOR_HA_TTL": "5"})


# -- every key's rule -------------------------------------------------------------------------------

ENVIRONMENT = """
[[environments]]
id = 10
image = "python:3.12-slim"
prewarming_pool_size = {size}
cpu_limit = 20
memory_limit = 512
network_access = false
exposed_ports = {ports}
"""


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        ("[server]\ngraceful_timeout = -1\n", {}, "server.graceful_timeout: must be 0 or more, got -1"),
        ("[server]\ngraceful_timeout = nan\n", {}, "server.graceful_timeout: must be 0 or more, got nan"),
        ("[server]\ngraceful_timeout = inf\n", {}, "server.graceful_timeout: must be 0 or more, got inf"),
        (
            "",
            {"SUPERVISOR_SERVER_GRACEFUL_TIMEOUT": "NaN"},
            "server.graceful_timeout: must be 0 or more, got nan (from SUPERVISOR_SERVER_GRACEFUL_TIMEOUT)",
        ),
        ("[alert]\nreload_timeout = -5\n", {}, "alert.reload_timeout: must be 0 or more, got -5"),
        ("[factory]\nmax_backoff = -1\n", {}, "factory.max_backoff: must be 0 or more, got -1"),
        ("[execution]\ntask = ''\n", {}, "execution.task: must be not empty, got ''"),
        ("[execution]\nworkspace = 'ws'\n", {}, "execution.workspace: must be an absolute path, got 'ws'"),
        ("[log]\nformat = 'xml'\n", {}, "log.format: 'xml' is not one of text, json"),
        (
            "[nomad]\ndirect_exec = 'sometimes'\n",
            {},
            "nomad.direct_exec: 'sometimes' is not one of auto, always, never",
        ),
        ("[nomad]\naddress = 'nomad:4646'\n", {}, "nomad.address: must be an http:// or https:// URL"),
        ("[ha]\nlock_path = '/leader'\n", {}, "ha.lock_path: must be letters, digits"),
        ("[server]\nport = 1.5\n", {}, "server.port: 1.5 is not a valid int"),
        ("[log]\naccess = 'yes'\n", {}, "log.access: 'yes' is not a valid bool"),
        ("", {"SUPERVISOR_LOG_ACCESS": "maybe"}, "SUPERVISOR_LOG_ACCESS: 'maybe' is not a valid bool"),
        (
            ENVIRONMENT.format(size=-1, ports="[]"),
            {},
            "environments[0].prewarming_pool_size: must be 0 to 10000, got -1",
        ),
        (
            ENVIRONMENT.format(size=1, ports="[0]"),
            {},
            "environments[0].exposed_ports: must be 1 to 65535, got 0",
        ),
        (ENVIRONMENT.format(size=1, ports="[]") + "colour = 1\n", {}, "environments[0].colour: unknown key"),
        ("[server]\ntimeout = 1\n", {}, "server.timeout: unknown key"),
        ("[sever]\n", {}, "sever: unknown section; did you mean server?"),
    ],
)
def test_every_key_is_held_to_its_rule(
    tmp_path: Path, text: str, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(write(tmp_path, text), environ)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value), "one line"


@pytest.mark.parametrize(
    ("text", "environ"),
    [
        ("[server]\ngraceful_timeout = 0\nport = 0\n", {}),
        ("[alert]\nreload_timeout = 0\nprewarming_pool_threshold = 1\n", {}),
        ("[log]\nlevel = 'debug'\n", {}),
        ("[nomad]\naddress = 'http://10.0.0.5:4646/'\n", {}),
        ("[ha]\nttl = 86400\nlock_delay = 0\n", {}),
        ("", {"SUPERVISOR_NOMAD_ADDRESS": "http://a:4646, https://b:4646", "SUPERVISOR_HA_ENABLED": "yes"}),
        (ENVIRONMENT.format(size=0, ports="[8080]"), {}),
        ("", {"SUPERVISOR_SERVER_TOKEN": "", "SUPERVISOR_SERVER_MAX_BODY": "1024"}),
    ],
)
def test_the_values_that_made_sense_still_load(tmp_path: Path, text: str, environ: dict[str, str]) -> None:
    load_settings(write(tmp_path, text), environ)


def test_a_section_out_of_its_rules_cannot_be_made_in_code_either() -> None:
    with pytest.raises(ConfigError, match=r"^port: must be 0 to 65535, got -1$"):
        ServerSettings(port=-1)
    with pytest.raises(ConfigError, match=r"^graceful_timeout: must be 0 or more, got nan$"):
        ServerSettings(graceful_timeout=float("nan"))


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("SUPERVISOR_SERVER_TOKN", "did you mean SUPERVISOR_SERVER_TOKEN?"),
        ("SUPERVISOR_ADMISSION_WAIT_TIMOUT", "did you mean SUPERVISOR_ADMISSION_WAIT_TIMEOUT?"),
        ("SUPERVISOR_LOG_LEVELS", "did you mean SUPERVISOR_LOG_LEVEL?"),
        ("SUPERVISOR_CONFIGFILE", "did you mean SUPERVISOR_CONFIG?"),
        ("SUPERVISOR_XYZZY", "`supervisor config example` lists every key"),
    ],
)
def test_a_misspelt_variable_is_an_error_naming_the_closest(name: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, {name: "1"})
    assert str(raised.value) == f"{name}: no such setting; {suggestion}"


def test_supervisords_own_variables_are_not_ours() -> None:
    environ = {"SUPERVISOR_ENABLED": "1", "SUPERVISOR_SERVER_URL": "unix:///run/supervisor.sock"}
    assert load_settings(None, environ) == Settings()


@pytest.mark.parametrize(
    ("environ", "key"),
    [
        ({"SUPERVISOR_SERVER_TOKEN": "zq"}, "server.token"),
        ({"SUPERVISOR_NOMAD_TOKEN": "qzx"}, "nomad.token"),
        ({"NOMAD_TOKEN": "xyzzy"}, "NOMAD_TOKEN"),
    ],
)
def test_a_token_too_short_to_be_secret_is_refused_without_showing_it(
    environ: dict[str, str], key: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, environ)
    message = str(raised.value)
    assert message.startswith(f"{key}: a token of ")
    assert "too short to be secret" in message
    assert next(iter(environ.values())) not in message


def test_a_token_of_the_design_documents_example_turns_auth_on() -> None:
    assert load_settings(None, {"SUPERVISOR_SERVER_TOKEN": "s3cret"}).server.token == "s3cret"
    assert load_settings(None, {"NOMAD_TOKEN": "x" * 36}).nomad.token == ""


def test_a_wrong_type_for_a_secret_does_not_show_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^server\.token: the value is not a valid str$"):
        load_settings(write(tmp_path, "[server]\ntoken = 12345678\n"), {})


# -- the example file -------------------------------------------------------------------------------


def test_the_example_loads_as_the_defaults(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, example_config()), {}) == Settings()


def test_the_example_has_every_key_with_its_rule() -> None:
    example = example_config()
    for section, cls in SECTIONS.items():
        assert f"\n[{section}]" in example
        for attribute in attrs.fields(cls):
            lines = [line for line in example.splitlines() if line.startswith(f"{attribute.name} = ")]
            assert lines, f"{section}.{attribute.name} is missing"
            takes = described(attribute).takes
            if takes:
                assert f"[{takes}]" in " ".join(example.split()), f"{section}.{attribute.name}: [{takes}]"
            assert variable_name(section, attribute.name).startswith("SUPERVISOR_")
    assert "# [[environments]]" in example
    assert "# prewarming_pool_size = 5" in example
    assert all(len(line) <= 100 for line in example.splitlines())


def test_the_configuration_doc_shows_the_example_as_it_is() -> None:
    """docs/configuration.md's block is ``supervisor config example``'s output."""
    blocks = re.findall(r"```toml\n(.*?)```", CONFIGURATION_DOC.read_text(), flags=re.DOTALL)
    assert blocks == [example_config()]


# -- [nomad.network], a table inside [nomad] -----------------------------------------------------


def test_the_network_of_networked_runners_is_a_table_of_nomad(tmp_path: Path) -> None:
    text = '[nomad]\ndisable_force_pull = true\n\n[nomad.network]\nmode = "cni/secure-bridge"\n'
    settings = load_settings(
        write(tmp_path, text), {"SUPERVISOR_NOMAD_NETWORK_DNS_SERVERS": "10.0.0.53,1.1.1.1"}
    )
    assert settings.nomad.disable_force_pull is True
    assert settings.nomad_network.mode == "cni/secure-bridge"
    assert settings.nomad_network.dns_servers == ("10.0.0.53", "1.1.1.1")
    assert variable_name("nomad.network", "mode") == "SUPERVISOR_NOMAD_NETWORK_MODE"
    assert Settings().nomad_network.mode == "bridge"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[nomad.network]\nmodus = 'bridge'\n", r"^nomad\.network\.modus: unknown key; did you mean mode\?$"),
        ("[nomad.network]\nmode = ''\n", r"^nomad\.network\.mode: "),
        ("[nomad]\nnetwork = 3\n", r"^\[nomad\.network\] must be a table$"),
    ],
)
def test_a_wrong_network_setting_names_its_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(write(tmp_path, text), {})
