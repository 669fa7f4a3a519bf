"""The command line: argument checks, ``supervisor simulate`` and ``run`` as a user starts them,
``config example``, the probe's usage, SIGHUP.

The SIGHUP test on the signal loop runs on virtual time (``autojump_clock``) under a hard cap; the
others start real processes, which listen on 127.0.0.1 port 0."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing
from loguru import logger

from supervisor import __version__
from supervisor.cli import main, parse_listen, program_name
from supervisor.core.config import Settings, load_settings
from supervisor.core.config_example import example_config
from supervisor.ops.logs import configure_logging
from supervisor.ops.reload import Reloader
from supervisor.ops.signals import run_until_signalled

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:7200", ("127.0.0.1", 7200)),
        (":0", ("127.0.0.1", 0)),
        ("[::1]:80", ("::1", 80)),
        ("localhost", ("localhost", 9)),
        ("7201", ("127.0.0.1", 7201)),
    ],
)
def test_parse_listen(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value, default_port=9) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--listen", "0.0.0.0:4646"], "serving it off loopback needs --token"),
        (["simulate", "--listen", "127.0.0.1:http"], "port 'http' is not a number"),
        (["simulate", "--listen", "127.0.0.1:70000"], "outside 0-65535"),
        (["simulate", "--nodes", "0"], "at least 1"),
        (["run", "--log-level", "loud"], "--log-level: 'loud' is not one of TRACE, DEBUG, INFO"),
        (["check", "--config", "/nonexistent/supervisor.toml"], "configuration: config file /nonexistent"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "simulate" in capsys.readouterr().out


def test_simulate_serves_until_sigterm() -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "supervisor",
            "simulate",
            "--listen",
            "127.0.0.1:0",
            "--nodes",
            "2",
            "--seed",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].startswith("export NOMAD_ADDR="):
            line = process.stdout.readline()
            assert line, "simulate exited before it was ready"
            lines.append(line.strip())
        addresses = lines[-1].removeprefix("export NOMAD_ADDR=").split(",")
        assert len(addresses) == 3
        nodes = httpx.get(addresses[0] + "/v1/nodes", timeout=5).json()
        assert sorted(n["Name"] for n in nodes) == ["worker-01", "worker-02"]
        assert [n["Status"] for n in nodes] == ["ready", "ready"]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.communicate()


def test_run_with_a_bad_config_exits_2_naming_the_key(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    config = tmp_path / "bad.toml"
    config.write_text("[server]\nport = 'x'\n")
    assert main(["run", "--config", str(config)]) == 2
    assert "server.port" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "environ", "address"),
    [
        (["--listen", "0.0.0.0:7200"], {}, "0.0.0.0"),
        (["--listen", "0.0.0.0:7200"], {"SUPERVISOR_SERVER_TOKEN": "s3cret"}, "0.0.0.0"),
        (["--listen", "[::]:7200"], {"SUPERVISOR_SERVER_TOKEN": "s3cret"}, "::"),
        ([], {"SUPERVISOR_SERVER_ADDRESS": "192.0.2.7"}, "192.0.2.7"),
        ([], {"SUPERVISOR_SERVER_ADDRESS": "runner-api.example.org"}, "runner-api.example.org"),
    ],
)
def test_run_refuses_the_embedded_cluster_off_loopback_with_or_without_a_token(
    argv: list[str],
    environ: dict[str, str],
    address: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in os.environ:
        if name.startswith(("NOMAD_", "SUPERVISOR_")):
            monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["run", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"supervisor run: serving on {address} needs a Nomad cluster: ")
    assert "NOMAD_ADDR" in lines[0]
    assert "[nomad] address" in lines[0]


def test_run_refuses_a_config_files_address_off_loopback_without_nomad(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in os.environ:
        if name.startswith(("NOMAD_", "SUPERVISOR_")):
            monkeypatch.delenv(name)
    config = tmp_path / "supervisor.toml"
    config.write_text('[server]\naddress = "0.0.0.0"\ntoken = "s3cret"\n')
    assert main(["run", "--config", str(config)]) == 2
    assert "NOMAD_ADDR or [nomad] address" in capsys.readouterr().err


def test_run_with_a_job_template_that_cannot_carry_a_runner_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOMAD_ADDR", raising=False)
    template = tmp_path / "runner.json"
    template.write_text('{"Type": "service"}')
    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nport = 0\n\n[nomad]\njob_template = "{template}"\n')
    assert main(["run", "--config", str(config)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"supervisor run: configuration: nomad.job_template {template}: type is 'service'; " + (
        "a runner job is a batch job"
    )


def start_run(options: list[str], environ: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
    """``supervisor run`` with ``options``, and its log lines until it serves."""
    argv = [sys.executable, "-m", "supervisor", "run", *options]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ)
    assert process.stderr is not None
    lines: list[str] = []
    while not any("serving the API on" in line for line in lines):
        line = process.stderr.readline()
        assert line, "run exited before it served: " + "".join(lines)
        lines.append(line)
    return process, lines


def test_run_starts_on_the_embedded_cluster_and_stops_on_sigterm() -> None:
    environ = {
        k: v for k, v in __import__("os").environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))
    }
    process, lines = start_run(["--listen", "127.0.0.1:0"], environ)
    try:
        assert process.stderr is not None
        assert any("embedded simulated cluster" in line for line in lines), "it says it started the cluster"
        address = lines[-1].rsplit("serving the API on ", 1)[1].strip()
        health = httpx.get(address + "/api/v1/health", timeout=5)
        assert health.status_code in (204, 503)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()
        process.communicate()


def test_an_address_in_use_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["simulate", "--listen", f"127.0.0.1:{port}", "--servers", "1"]) == 1
    error = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in error
    assert "Traceback" not in error


def test_health_probe_of_a_daemon_that_is_not_there(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as probe_port:
        probe_port.bind(("127.0.0.1", 0))
        port = probe_port.getsockname()[1]
    assert main(["health", "--url", f"http://127.0.0.1:{port}", "--timeout", "2"]) == 3
    assert capsys.readouterr().out.startswith("UNKNOWN: the supervisor at")
    assert main(["health", "--url", f"http://127.0.0.1:{port}", "--timeout", "2", "--json"]) == 3
    document = json.loads(capsys.readouterr().out)
    assert document["status"] == "unknown"
    assert document["message"].startswith(f"the supervisor at http://127.0.0.1:{port} cannot be reached")


def test_the_daemons_log_is_one_json_stream_without_its_tokens() -> None:
    """``supervisor run`` with the access log on and JSON lines: the API server's lines and the access
    lines are in the stream, every line is JSON, and neither token appears, not even in a URL."""
    environ = {
        k: v for k, v in __import__("os").environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))
    }
    environ.update(SUPERVISOR_SERVER_TOKEN="poseidon-s3cret", SUPERVISOR_LOG_ACCESS="true")
    process, lines = start_run(["--listen", "127.0.0.1:0", "--log-format", "json"], environ)
    try:
        assert process.stderr is not None
        address = json.loads(lines[-1])["message"].rsplit(" ", 1)[1]
        headers = {"Poseidon-Token": "poseidon-s3cret"}
        path = "/api/v1/runners/poseidon-s3cret/files"
        assert httpx.get(address + path, headers=headers, timeout=5).status_code == 410
        assert httpx.get(address + "/api/v1/statistics/execution-environments", timeout=5).status_code == 401
        statistics = httpx.get(
            address + "/api/v1/statistics/execution-environments", headers=headers, timeout=5
        )
        assert statistics.status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        lines += process.stderr.readlines()
    finally:
        process.kill()
        process.communicate()
    records = [json.loads(line) for line in lines]
    messages = [str(record["message"]) for record in records]
    assert messages[0].startswith(f"supervisor {__version__} starting with no configuration file; ")
    assert records[0]["version"] == __version__
    assert "server.token=*** (SUPERVISOR_SERVER_TOKEN)" in messages[0], "the startup line masks the token"
    assert "log.access=true (SUPERVISOR_LOG_ACCESS)" in messages[0], "and says where each value came from"
    assert "server.port=0 (--listen)" in messages[0]
    assert any(m.startswith("serving the API on http://127.0.0.1:") for m in messages), "the API's line"
    assert any("/api/v1/statistics/execution-environments" in m and " 401 " in m for m in messages), "access"
    assert any("/api/v1/runners/***/files" in m for m in messages), "the token in a path is masked"
    assert not any("poseidon-s3cret" in line for line in lines)


# -- supervisor config example ----------------------------------------------------------------------


def test_config_example_prints_the_whole_commented_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "example"]) == 0
    assert capsys.readouterr().out == example_config()


def test_config_alone_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["config"])
    assert exited.value.code == 2
    assert "SUBCOMMAND" in capsys.readouterr().err


# -- supervisor health: usage and the token ---------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--timeout", "soon"], "UNKNOWN: --timeout 'soon': must be a positive number of seconds"),
        (["--timeout", "0"], "UNKNOWN: --timeout '0': must be a positive number of seconds"),
        (["--timeout", "nan"], "UNKNOWN: --timeout 'nan': must be a positive number of seconds"),
        (
            ["--url", "127.0.0.1:7200"],
            "UNKNOWN: --url '127.0.0.1:7200': no scheme: write it as http://127.0.0.1:7200",
        ),
        (["--url", "ftp://host"], "UNKNOWN: --url 'ftp://host': the scheme 'ftp' is not http or https"),
        (["--url", "http://host:port"], "UNKNOWN: --url 'http://host:port': the port is not a number"),
        (["--token-file", "/nonexistent/token"], "UNKNOWN: --token-file /nonexistent/token: No such file"),
    ],
)
def test_health_usage_errors_are_unknown(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["health", *argv]) == 3
    assert capsys.readouterr().out.startswith(message)


def test_health_usage_errors_are_json_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["health", "--json", "--url", "localhost"]) == 3
    document = json.loads(capsys.readouterr().out)
    assert document == {
        "status": "unknown",
        "message": "--url 'localhost': no scheme: write it as http://localhost",
    }


@pytest.mark.parametrize("argv", [["--token", "a", "--token-file", "b"], ["--timeout"]])
def test_health_argument_errors_exit_3_too(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["health", *argv])
    assert exited.value.code == 3
    assert capsys.readouterr().out.startswith("UNKNOWN: ")


@pytest.mark.parametrize("argv", [["--tokne", "x"], ["extra"]])
def test_health_with_an_unknown_argument_is_unknown(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["health", *argv]) == 3
    assert capsys.readouterr().out == f"UNKNOWN: unrecognized arguments: {' '.join(argv)}\n"


def test_an_unknown_argument_elsewhere_is_still_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", "--tokne", "x"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --tokne x" in capsys.readouterr().err


def test_an_empty_token_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    token.write_text("\n")
    assert main(["health", "--token-file", str(token)]) == 3
    assert capsys.readouterr().out == f"UNKNOWN: --token-file {token}: the file is empty\n"


# -- names ------------------------------------------------------------------------------------------


def test_the_command_line_is_installed_under_both_names() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["supervisor"] == scripts["nomad-runner-supervisor"] == "supervisor.cli:main"


def test_the_program_names_itself_as_it_was_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/nomad-runner-supervisor"])
    assert program_name() == "nomad-runner-supervisor"
    monkeypatch.setattr(sys, "argv", ["/usr/lib/python3/site-packages/pytest/__main__.py"])
    assert program_name() == "supervisor"


def test_the_systemd_unit_is_the_projects_and_the_docs_show_it() -> None:
    unit = (ROOT / "scripts" / "systemd" / "nomad-runner-supervisor.service").read_text()
    assert not list(ROOT.glob("scripts/**/supervisor.service"))
    assert "/etc/nomad-runner-supervisor/config.toml" in unit
    assert "EnvironmentFile=-/etc/nomad-runner-supervisor/environment" in unit
    assert "/etc/supervisor" not in unit, "Supervisord's folder"
    lines = set(unit.splitlines())
    for document in ("README.md", "docs/operations.md"):
        text = (ROOT / document).read_text()
        assert "scripts/systemd/nomad-runner-supervisor.service" in text, document
        (block,) = re.findall(r"```ini\n(.*?)```", text, flags=re.DOTALL)
        assert set(block.splitlines()) <= lines, f"{document} shows the unit as it is"


# -- SIGHUP -----------------------------------------------------------------------------------------


async def test_sighup_reloads_and_never_stops(autojump_clock: trio.testing.MockClock) -> None:
    class Daemon:
        settings = Settings()

        def __init__(self) -> None:
            self.stops = 0
            self.done = trio.Event()

        def stop(self) -> None:
            self.stops += 1

        async def run(self) -> None:
            await self.done.wait()

    daemon = Daemon()
    reloads: list[float] = []
    reloaded = trio.Event()

    def reload() -> None:
        reloads.append(trio.current_time())
        reloaded.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_until_signalled, daemon, reload)
            await trio.testing.wait_all_tasks_blocked()
            os.kill(os.getpid(), signal.SIGHUP)
            await reloaded.wait()
            reloaded = trio.Event()
            os.kill(os.getpid(), signal.SIGHUP)
            await reloaded.wait()
            assert daemon.stops == 0, "SIGHUP never stops the daemon"
            daemon.done.set()
    assert len(reloads) == 2


def reloader(tmp_path: Path, text: str) -> tuple[Reloader, Path, io.StringIO]:
    config = tmp_path / "config.toml"
    config.write_text(text)
    out = io.StringIO()
    settings = load_settings(config, {})
    stream = configure_logging(settings.log, [], out, environ={})
    return Reloader(lambda: load_settings(config, {}), settings, stream), config, out


def test_a_reload_applies_the_log_level_and_says_what_waits_for_a_restart(tmp_path: Path) -> None:
    reloading, config, out = reloader(tmp_path, '[log]\nlevel = "INFO"\n[server]\nmax_files = 10\n')
    try:
        logger.debug("not yet")
        config.write_text(
            '[log]\nlevel = "DEBUG"\nformat = "json"\n[server]\nmax_files = 20\ntoken = "s3cret-token"\n'
        )
        found = reloading.reload()
        logger.debug("now")
        config.write_text('[log]\nlevel = "DEBUG"\nformat = "json"\n[server]\nmax_files = 10\n')
        assert reloading.reload() == {}, "the file is as the daemon runs again"
    finally:
        logger.remove()
        logging.basicConfig(handlers=[], force=True)
    assert found == {
        "log.level": ('"INFO"', '"DEBUG"'),
        "log.format": ('"text"', '"json"'),
        "server.max_files": ("10", "20"),
        "server.token": ('""', "***"),
    }
    assert reloading.settings.log.level == "DEBUG"
    assert reloading.settings.server.max_files == 10, "the rest waits for a restart"
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    messages = [line["message"] for line in lines]
    assert messages == [
        'SIGHUP: reloaded log.format "text" -> "json", log.level "INFO" -> "DEBUG"',
        'SIGHUP: changed, applied at the next start: server.max_files 10 -> 20, server.token "" -> ***',
        "now",
        "SIGHUP: the configuration is unchanged",
    ]
    assert lines[1]["level"] == "WARNING"
    assert "s3cret-token" not in out.getvalue()


def test_a_reload_of_a_broken_file_changes_nothing(tmp_path: Path) -> None:
    reloading, config, out = reloader(tmp_path, '[log]\nlevel = "INFO"\n')
    try:
        config.write_text('[log]\nlevel = "LOUD"\n')
        assert reloading.reload() == {}
        logger.info("still here")
    finally:
        logger.remove()
        logging.basicConfig(handlers=[], force=True)
    first, second = out.getvalue().splitlines()
    assert " | ERROR    | " in first
    assert first.endswith(
        "SIGHUP: the configuration does not load, nothing changed: log.level: 'LOUD' is not one of "
        "TRACE, DEBUG, INFO, SUCCESS, WARNING, ERROR, CRITICAL"
    )
    assert second.endswith("still here")


def test_run_reloads_on_sighup_and_goes_on(tmp_path: Path) -> None:
    """``supervisor run``: SIGHUP with a new log level, then with a broken file; the daemon serves
    throughout, and stops on SIGTERM."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_"))}
    config = tmp_path / "config.toml"
    config.write_text('[log]\nlevel = "INFO"\n')
    process, lines = start_run(["--listen", "127.0.0.1:0", "--config", str(config)], environ)
    try:
        assert process.stderr is not None
        address = lines[-1].rsplit("serving the API on ", 1)[1].strip()
        config.write_text('[log]\nlevel = "DEBUG"\n')
        process.send_signal(signal.SIGHUP)
        lines += read_until(process, 'SIGHUP: reloaded log.level "INFO" -> "DEBUG"')
        config.write_text("[log\n")
        process.send_signal(signal.SIGHUP)
        lines += read_until(process, "SIGHUP: the configuration does not load, nothing changed")
        assert process.poll() is None, "SIGHUP never stops it"
        assert httpx.get(address + "/api/v1/version", timeout=5).status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()
        process.communicate()


def read_until(process: subprocess.Popen[str], text: str) -> list[str]:
    assert process.stderr is not None
    lines: list[str] = []
    while not lines or text not in lines[-1]:
        line = process.stderr.readline()
        assert line, "run exited: " + "".join(lines)
        lines.append(line)
    return lines
