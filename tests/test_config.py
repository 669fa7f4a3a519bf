"""The configuration: TOML, SUPERVISOR_<SECTION>_<KEY> overrides, Nomad's variables, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.base.errors import ConfigError
from supervisor.core.config import load_settings

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
        ("[server]\nport = 99999\n", {}, "server.port: 99999 is outside"),
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
    with pytest.raises(ConfigError, match=r"alert\.check_interval: must be positive"):
        load_settings(None, {"SUPERVISOR_ALERT_CHECK_INTERVAL": "0"})


def test_max_starting_is_a_count_of_at_least_one() -> None:
    assert load_settings(None, {}).factory.max_starting == 10
    assert load_settings(None, {"SUPERVISOR_FACTORY_MAX_STARTING": "25"}).factory.max_starting == 25
    with pytest.raises(ConfigError, match=r"factory\.max_starting: must be at least 1"):
        load_settings(None, {"SUPERVISOR_FACTORY_MAX_STARTING": "0"})


def test_ha_is_off_by_default_and_turned_on_by_the_environment() -> None:
    assert not load_settings(None, {}).ha.enabled
    settings = load_settings(None, {"SUPERVISOR_HA_ENABLED": "true", "SUPERVISOR_HA_TTL": "12"})
    assert settings.ha.enabled
    assert settings.ha.ttl == 12.0


def test_an_ha_ttl_nomad_would_refuse_stops_startup_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"ha\.ttl: 5 is outside .*10 s to 24 h"):
        load_settings(None, {"SUPERVISOR_HA_TTL": "5"})
