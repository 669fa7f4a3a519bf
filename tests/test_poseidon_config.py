"""``supervisor config import-poseidon``: Poseidon's configuration written as ours
(``supervisor/core/poseidon_config.py``), key by key, loaded by our own loader; the command line's
output, notes, messages and exit codes; and ``supervisor check`` taking what it writes.

Plain sync tests; every translation is loaded with ``load_settings`` from a file, as the daemon
loads it. One test runs ``supervisor check`` as a process against a closed port (about a second).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor.base.errors import ConfigError
from supervisor.cli import main
from supervisor.core.config import Settings, load_settings, section_values
from supervisor.core.poseidon_config import Translation, translate
from supervisor.core.poseidon_settings import read_poseidon_settings

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXAMPLE = FIXTURES / "poseidon-configuration.example.yaml"
FULL = FIXTURES / "poseidon-configuration-full.yaml"


def translated(text: str, environ: dict[str, str] | None = None) -> Translation:
    settings = read_poseidon_settings(text, source="poseidon.yaml", environ=environ)
    return translate(settings, source="poseidon.yaml")


def loaded(translation: Translation, tmp_path: Path) -> Settings:
    path = tmp_path / "config.toml"
    path.write_text(translation.text)
    return load_settings(path, {})


def value(settings: Settings, dotted: str) -> Any:
    section, _, key = dotted.rpartition(".")
    return getattr(section_values(settings, section), key)


def comments(translation: Translation) -> str:
    """Every comment of the file, in one line: the words of a wrapped one joined."""
    return " ".join(line.partition("# ")[2] for line in translation.text.splitlines() if "# " in line)


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as refused:
        translated(text)
    return str(refused.value)


# -- key by key -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("poseidon", "ours", "expected"),
    [
        ("server:\n  address: 10.0.0.5\n", "server.address", "10.0.0.5"),
        ("server:\n  address: '[::1]'\n", "server.address", "::1"),
        ("server:\n  address: ''\n", "server.address", "0.0.0.0"),
        ("server:\n  port: 7300\n", "server.port", 7300),
        ("server:\n  token: codeocean-secret\n", "server.token", "codeocean-secret"),
        ("server:\n  interactivestderr: false\n", "execution.interactive_stderr", False),
        (
            "server:\n  templatejobfile: /etc/poseidon/job.hcl\n",
            "nomad.job_template",
            "/etc/poseidon/job.hcl",
        ),
        ("server:\n  alert:\n    prewarmingpoolthreshold: 0.3\n", "alert.prewarming_pool_threshold", 0.3),
        ("server:\n  alert:\n    prewarmingpoolthreshold: -1\n", "alert.prewarming_pool_threshold", 0.0),
        ("server:\n  alert:\n    prewarmingpoolreloadtimeout: 120\n", "alert.reload_timeout", 120.0),
        ("nomad:\n  address: nomad.example.org\n", "nomad.address", ("http://nomad.example.org:4646",)),
        ("nomad:\n  port: 4647\n  tls:\n    active: true\n", "nomad.address", ("https://127.0.0.1:4647",)),
        ("nomad:\n  address: '::1'\n", "nomad.address", ("http://[::1]:4646",)),
        ("nomad:\n  address: '[fd00::1]'\n", "nomad.address", ("http://[fd00::1]:4646",)),
        ("nomad:\n  token: 0b0c3f1e-6d5a\n", "nomad.token", "0b0c3f1e-6d5a"),
        ("nomad:\n  namespace: poseidon\n", "nomad.namespace", "poseidon"),
        ("nomad:\n  tls:\n    active: true\n    cafile: /ca.pem\n", "nomad.ca_cert", "/ca.pem"),
        ("nomad:\n  tls:\n    active: true\n    certfile: /c.pem\n", "nomad.client_cert", "/c.pem"),
        ("nomad:\n  tls:\n    active: true\n    keyfile: /k.pem\n", "nomad.client_key", "/k.pem"),
        ("nomad:\n  tls:\n    cafile: /ca.pem\n", "nomad.ca_cert", ""),  # unused without active
        ("nomad:\n  disableforcepull: true\n", "nomad.disable_force_pull", True),
        ("nomad:\n  network:\n    mode: cni/secure-bridge\n", "nomad.network.mode", "cni/secure-bridge"),
        ("nomad:\n  network:\n    mode: ''\n", "nomad.network.mode", "host"),
        (
            "nomad:\n  network:\n    dns:\n      servers: [9.9.9.9]\n",
            "nomad.network.dns_servers",
            ("9.9.9.9",),
        ),
        ("nomad:\n  network:\n    dns:\n      searches: [a.org]\n", "nomad.network.dns_searches", ("a.org",)),
        (
            "nomad:\n  network:\n    dns:\n      options: [ndots:2]\n",
            "nomad.network.dns_options",
            ("ndots:2",),
        ),
        ("logger:\n  level: warn\n", "log.level", "WARNING"),
        ("logger:\n  level: Fatal\n", "log.level", "CRITICAL"),
        ("logger:\n  level: trace\n", "log.level", "TRACE"),
        ("logger:\n  formatter: JSONFormatter\n", "log.format", "json"),
        ("logger:\n  formatter: LogfmtFormatter\n", "log.format", "text"),  # logrus' text for any other
    ],
)
def test_each_key_becomes_ours(poseidon: str, ours: str, expected: Any, tmp_path: Path) -> None:
    assert value(loaded(translated(poseidon), tmp_path), ours) == expected


def test_server_tls_is_served_as_poseidon_serves_it(tmp_path: Path) -> None:
    tls = (
        "server:\n  tls:\n    active: true\n    certfile: /p.crt\n    keyfile: /p.key\n    cafile: /ca.crt\n"
    )
    translation = translated(tls)
    settings = loaded(translation, tmp_path)
    assert (settings.server_tls.cert_file, settings.server_tls.key_file) == ("/p.crt", "/p.key")
    assert settings.server_tls.min_version == "1.3"
    assert (
        '# server.tls.cafile = "/ca.crt" (line 6): no key here: Poseidon\'s systemd watchdog'
        in translation.text
    )
    inactive = translated("server:\n  tls:\n    certfile: /p.crt\n    keyfile: /p.key\n")
    assert loaded(inactive, tmp_path).server_tls.cert_file == "", "Poseidon served plain HTTP"
    assert 'server.tls.certfile = "/p.crt" (line 3): unused while server.tls.active is false' in inactive.text


def test_poseidons_defaults_are_written_where_they_are_not_ours(tmp_path: Path) -> None:
    translation = translated("")
    settings = loaded(translation, tmp_path)
    assert settings.nomad.address == ("http://127.0.0.1:4646",), "ours has none: the simulated cluster"
    assert settings.alert.prewarming_pool_threshold == 0.0, "Poseidon's alert is off by default"
    assert settings.alert.reload_timeout == 0.0
    assert settings.nomad.namespace == "default"
    assert settings.log.level == "INFO"
    assert 'address = ["http://127.0.0.1:4646"]  # nomad.address (Poseidon\'s default)' in translation.text
    assert "its\n# defaults included" in translation.text, "the header says so"
    assert translation.notes == ()


def test_the_origin_of_each_value_is_written_beside_it() -> None:
    text = translated("server:\n  port: 7300\n", {"POSEIDON_SERVER_TOKEN": "from-the-env"}).text
    assert re.search(r"^port = 7300 +# server\.port \(line 2\)$", text, re.MULTILINE)
    assert re.search(
        r'^token = "from-the-env" +# server\.token \(POSEIDON_SERVER_TOKEN\)', text, re.MULTILINE
    )
    assert re.search(r"^level = \"INFO\" +# logger\.level \(Poseidon's default\)$", text, re.MULTILINE)


# -- keys without a counterpart ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("poseidon", "comment"),
    [
        ("server:\n  systemdsocketactivation: true\n", "the daemon serves the socket systemd passes"),
        ("server:\n  systemdsocketactivation: false\n", "the daemon binds the address itself"),
        ("server:\n  loggingfiltertoken: abcdef\n", "filter a probe's User-Agent in the log pipeline"),
        ("nomad:\n  enabled: false\n", "this daemon always runs its runners on Nomad"),
        ("nomad:\n  network:\n    hostname: runner\n", "not carried over: a runner's group network here"),
        ("aws:\n  endpoint: wss://lambda\n", 'aws.endpoint = "wss://lambda" (line 2): not supported'),
        ("profiling:\n  cpufile: x.pgo\n", 'profiling.cpufile = "x.pgo" (line 2): no counterpart'),
        ("profiling:\n  memorythreshold: 2000\n", "alert on process_resident_memory_bytes from GET /metrics"),
        ("influxdb:\n  url: http://influx:8086\n", "scrape GET /metrics with Prometheus instead"),
        ("influxdb:\n  bucket: b\n", "alert rules and a dashboard ship in scripts/monitoring/"),
        ("sentry:\n  environment: staging\n", "#   SENTRY_ENVIRONMENT=staging"),
        ("sentry:\n  release: r1\n", "#   SENTRY_RELEASE=r1"),
        ("sentry:\n  debug: true\n", "#   SENTRY_DEBUG=true"),
        ("sentry:\n  enabletracing: true\n  tracessamplerate: 0.2\n", "#   SENTRY_TRACES_SAMPLE_RATE=0.2"),
        ("sentry:\n  maxspans: 10\n", "sentry.maxspans = 10 (line 2): no counterpart here"),
    ],
)
def test_a_key_without_a_counterpart_is_a_comment_saying_what_to_do(
    poseidon: str, comment: str, tmp_path: Path
) -> None:
    translation = translated(poseidon)
    flat = re.sub(r"\n# (?! )", " ", translation.text)  # the comments' lines joined
    assert comment in flat
    loaded(translation, tmp_path)


def test_sentrys_dsn_becomes_a_variable_and_traces_only_when_enabled() -> None:
    text = translated("sentry:\n  dsn: https://k@sentry.example/1\n  tracessamplerate: 1.0\n").text
    assert "#   SENTRY_DSN=https://k@sentry.example/1" in text
    assert "SENTRY_TRACES_SAMPLE_RATE=" not in text, "sentry-go traces nothing without enabletracing"
    assert "the variable SENTRY_TRACES_SAMPLE_RATE here" in text


def test_the_logging_filter_token_is_never_shown() -> None:
    assert "watchdog-secret" not in translated("server:\n  loggingfiltertoken: watchdog-secret\n").text
    assert "SecretBase64" not in translated("influxdb:\n  token: SecretBase64==\n").text


def test_what_runs_differently_is_a_note() -> None:
    text = "nomad:\n  enabled: false\n  network:\n    ip: 10.0.0.2\n    cidr: 10.0.0.0/24\n"
    text += "aws:\n  enabled: true\n"
    assert translated(text).notes == (
        "nomad.enabled (line 2): false: Poseidon ran no runner on Nomad; this daemon always does",
        "nomad.network.cidr, nomad.network.ip: not carried over: a runner's group network here is the mode, "
        "DNS and its exposed ports",
        "aws.enabled (line 7): true: the environments Poseidon served from AWS Lambda are not served here",
    )
    json_template = translated("server:\n  templatejobfile: /etc/job.json\n")
    assert json_template.notes[0].startswith("server.templatejobfile (line 2): Poseidon read it as HCL")


def test_a_relative_path_is_a_note_since_the_service_runs_elsewhere() -> None:
    translation = translated("server:\n  templatejobfile: ./poseidon.hcl\n")
    assert translation.notes == (
        "server.templatejobfile (line 2): './poseidon.hcl' is relative to Poseidon's working directory: "
        "write it absolute",
    )
    assert "; relative to Poseidon's working directory: write it absolute" in comments(translation)


# -- what cannot be written -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("poseidon", "message"),
    [
        (
            "server:\n  token: abc\n",
            "poseidon.yaml: server.token (line 2): a token of 3 characters is too short",
        ),
        ("nomad:\n  token: abcde\n", "nomad.token (line 2): a token of 5 characters is too short"),
        ("server:\n  port: 70000\n", "server.port (line 2): 70000 is not a port (0 to 65535)"),
        ("nomad:\n  port: -1\n", "nomad.port (line 2): -1 is not a port"),
        ("nomad:\n  address: http://nomad\n", "nomad.address (line 2): 'http://nomad' is not a host name"),
        ("nomad:\n  address: nomad:4646\n", "nomad.address (line 2): 'nomad:4646' is not a host name"),
        ("nomad:\n  address: ''\n", "nomad.address (line 2): '' is not a host name"),
        ("server:\n  tls:\n    active: true\n", "server.tls.certfile (Poseidon's default): empty while"),
        ("server:\n  alert:\n    prewarmingpoolthreshold: 1.5\n", "1.5 keeps Poseidon's health in warning"),
        ("logger:\n  level: loud\n", "logger.level (line 2): 'loud' is no level logrus knows"),
    ],
)
def test_what_this_daemon_cannot_run_with_is_refused(poseidon: str, message: str) -> None:
    assert message in refusal(poseidon)


# -- the fixtures: every key named, and loaded ------------------------------------------------------


def _leaf_keys(document: Any, prefix: str = "") -> list[str]:
    if not isinstance(document, dict):
        return [prefix.rstrip(".")]
    keys = []
    for key, item in document.items():
        nested = key not in ("cni", "tags") and isinstance(item, dict)  # shown whole, as maps
        if item is not None:  # a section of comments only, or a key left empty: nothing set
            keys += _leaf_keys(item, f"{prefix}{key}.") if nested else [f"{prefix}{key}"]
    return keys


@pytest.mark.parametrize("fixture", [EXAMPLE, FULL], ids=["example", "full"])
def test_every_key_of_the_file_is_named_in_the_translation(fixture: Path, tmp_path: Path) -> None:
    text = fixture.read_text()
    translation = translate(read_poseidon_settings(text, source=fixture.name), source=fixture.name)
    for key in _leaf_keys(yaml.safe_load(text)):
        assert re.search(rf"(^|[#+] ){re.escape(key)}( |$)", translation.text, re.MULTILINE), key
    loaded(translation, tmp_path)


def test_poseidons_example_file_loads_as_ours(tmp_path: Path) -> None:
    settings = loaded(
        translate(read_poseidon_settings(EXAMPLE.read_text(), source="x"), source="x"), tmp_path
    )
    assert (settings.server.address, settings.server.port) == ("127.0.0.1", 7200)
    assert settings.nomad.address == ("http://127.0.0.1:4646",)
    assert settings.nomad.disable_force_pull is True
    assert settings.nomad_network.mode == "cni/secure-bridge"
    assert (settings.alert.prewarming_pool_threshold, settings.alert.reload_timeout) == (0.5, 300.0)
    assert settings.execution.interactive_stderr is True
    assert settings.log.level == "DEBUG"
    assert settings.log.format == "text"


def test_the_full_file_loads_as_ours(tmp_path: Path) -> None:
    settings = loaded(translate(read_poseidon_settings(FULL.read_text(), source="x"), source="x"), tmp_path)
    assert (settings.server.address, settings.server.port) == ("0.0.0.0", 7300)
    assert settings.server.token == "codeocean-to-runners"
    assert settings.server_tls.cert_file == "/etc/poseidon/poseidon.crt"
    assert settings.nomad.address == ("https://nomad.example.org:4647",)
    assert settings.nomad.namespace == "poseidon"
    assert settings.nomad.client_key == "/etc/poseidon/nomad-client-key.pem"
    assert settings.nomad.job_template == "/etc/poseidon/job.hcl"
    assert settings.nomad_network.dns_servers == ("10.0.0.53", "9.9.9.9")
    assert (settings.alert.prewarming_pool_threshold, settings.alert.reload_timeout) == (0.25, 600.0)
    assert settings.execution.interactive_stderr is False
    assert (settings.log.level, settings.log.format) == ("WARNING", "json")


# -- the command line -------------------------------------------------------------------------------


def test_the_command_prints_the_translation_and_notes_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    poseidon = tmp_path / "configuration.yaml"
    poseidon.write_text("server:\n  port: 7300\n  prot: 1\n")
    assert main(["config", "import-poseidon", str(poseidon)]) == 0
    out, err = capsys.readouterr()
    assert (
        out
        == translate(
            read_poseidon_settings(poseidon.read_text(), source=str(poseidon)), source=str(poseidon)
        ).text
    )
    assert err == (
        f"supervisor config import-poseidon: {poseidon} line 3: server.prot: Poseidon has no such key and "
        "ignores it; not translated\n"
    )


def test_the_environment_is_read_only_with_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    poseidon = tmp_path / "configuration.yaml"
    poseidon.write_text("server:\n  port: 7300\n")
    monkeypatch.setenv("POSEIDON_SERVER_PORT", "7400")
    monkeypatch.setenv("POSEIDON_SERVER_ALERT_PREWARMINGPOOLTHRESHOLD", "0.5")
    assert main(["config", "import-poseidon", str(poseidon)]) == 0
    out, err = capsys.readouterr()
    assert "\nport = 7300 " in out
    assert err == ""
    assert main(["config", "import-poseidon", "--env", str(poseidon)]) == 0
    out, err = capsys.readouterr()
    assert "\nport = 7400 " in out
    assert "(POSEIDON_SERVER_PORT)" in out
    assert "\nprewarming_pool_threshold = 0 " in out, "Poseidon cannot take a float from a variable"
    assert err == (
        "supervisor config import-poseidon: POSEIDON_SERVER_ALERT_PREWARMINGPOOLTHRESHOLD: Poseidon ignores "
        "it (server.alert.prewarmingpoolthreshold: a number cannot be set from a variable); not applied\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("server:\n  port: [7200\n", "{file} line 3: not YAML: expected ',' or ']', but got '<stream end>'"),
        (
            "server:\n  port: abc\n",
            "{file} line 2: server.port: 'abc' is not an integer (Poseidon stops on it too)",
        ),
        ("server:\n  token: abc\n", "{file}: server.token (line 2): a token of 3 characters is too short"),
        (b"\xff\xfe", "{file}: 'utf-8' codec can't decode byte 0xff"),
        # What our loader refuses of the translation (TOML has no DEL in a string): named, not written.
        ('server:\n  token: "abcdef\\x7f"\n', "{file}: this daemon refuses the translation: Illegal char"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    content: str | bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    poseidon = tmp_path / "configuration.yaml"
    if isinstance(content, bytes):
        poseidon.write_bytes(content)
    else:
        poseidon.write_text(content)
    assert main(["config", "import-poseidon", str(poseidon)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("supervisor config: import-poseidon: " + message.format(file=poseidon))
    assert err.count("\n") == 1


def test_a_missing_file_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "import-poseidon", "/nonexistent/configuration.yaml"]) == 2
    assert capsys.readouterr().err == (
        "supervisor config: import-poseidon: /nonexistent/configuration.yaml: No such file or directory\n"
    )


def test_no_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["config", "import-poseidon"])
    assert exited.value.code == 2
    assert "FILE" in capsys.readouterr().err


def test_check_takes_the_translation_as_a_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The configuration loads (``OK configuration``); a Nomad that does not answer is a check's
    failure (exit 1), not a configuration error (exit 2)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    poseidon = tmp_path / "configuration.yaml"
    poseidon.write_text(EXAMPLE.read_text().replace("  port: 4646", f"  port: {port}"))
    assert main(["config", "import-poseidon", str(poseidon)]) == 0
    ours = tmp_path / "config.toml"
    ours.write_text(capsys.readouterr().out)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "--config", str(ours)],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"OK    configuration  valid (from {ours}): ")
    assert any(
        line.startswith(f"FAIL  nomad servers  no Nomad server answers: http://127.0.0.1:{port} ")
        for line in lines
    )
