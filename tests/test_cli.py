"""The command line: argument checks, and ``supervisor simulate`` as a user starts it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from supervisor.cli import main, parse_listen


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


def test_run_refuses_the_embedded_cluster_off_loopback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--listen", "0.0.0.0:7200"]) == 2
    assert "needs server.token" in capsys.readouterr().err


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
        address = json.loads(lines[-1])["record"]["message"].rsplit(" ", 1)[1]
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
    messages = [json.loads(line)["record"]["message"] for line in lines]
    assert any(m.startswith("serving the API on http://127.0.0.1:") for m in messages), "the API's line"
    assert any("/api/v1/statistics/execution-environments" in m and " 401 " in m for m in messages), "access"
    assert any("/api/v1/runners/***/files" in m for m in messages), "the token in a path is masked"
    assert not any("poseidon-s3cret" in line for line in lines)
