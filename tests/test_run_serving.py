"""``supervisor run`` as an operator starts it: over TLS (a certificate that does not load stops it
in one line, SIGHUP re-reads it), and under systemd's socket activation, where a restart leaves
the connections made meanwhile waiting in the socket, answered by the next process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import h11
import httpx

from .test_cli import read_until, start_run
from .tls_certificates import Certificates, subject_names

# systemd's part: the socket as descriptor 3, and LISTEN_PID the pid of the process that execs.
SHIM = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "if fd != 3:\n"
    "    os.dup2(fd, 3)\n"
    "    os.close(fd)\n"
    "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1', LISTEN_FDNAMES='supervisor.socket')\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'supervisor', 'run', *sys.argv[2:]])\n"
)


def clean_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "SUPERVISOR_", "LISTEN_"))}


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    process.communicate()


def test_run_serves_tls_and_rereads_the_certificate_on_sighup(tmp_path: Path) -> None:
    certificates = Certificates(tmp_path)
    pair = certificates.issue("api", "first.example")
    config = tmp_path / "config.toml"
    config.write_text(f'[server.tls]\ncert_file = "{pair.cert_file}"\nkey_file = "{pair.key_file}"\n')
    process, lines = start_run(["--listen", "127.0.0.1:0", "--config", str(config)], clean_environ())
    try:
        address = lines[-1].rsplit("serving the API on ", 1)[1].strip()
        assert address.startswith("https://127.0.0.1:")
        port = int(address.rsplit(":", 1)[1])
        client = certificates.client()
        assert httpx.get(address + "/api/v1/version", verify=client, timeout=5).status_code == 200

        def served_names() -> list[str]:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                return subject_names(tls)

        assert "first.example" in served_names()
        renewed = certificates.issue("renewed", "second.example")
        Path(pair.cert_file).write_bytes(Path(renewed.cert_file).read_bytes())
        Path(pair.key_file).write_bytes(Path(renewed.key_file).read_bytes())
        process.send_signal(signal.SIGHUP)
        read_until(process, "SIGHUP: reloaded the TLS certificate")
        assert "second.example" in served_names()
        stop(process)
    finally:
        process.kill()
        process.communicate()


def test_run_with_a_certificate_that_does_not_load_exits_2_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "gone.pem"
    config = tmp_path / "config.toml"
    config.write_text(f'[server.tls]\ncert_file = "{missing}"\nkey_file = "{missing}"\n')
    argv = [sys.executable, "-m", "supervisor", "run", "--listen", "127.0.0.1:0", "--config", str(config)]
    done = subprocess.run(argv, capture_output=True, text=True, env=clean_environ(), timeout=60, check=False)
    assert done.returncode == 2
    line = f"supervisor run: configuration: server.tls.cert_file {missing}: cannot be read"
    assert done.stderr.strip().splitlines() == [f"{line}: No such file or directory"]


def popen_activated(held: socket.socket) -> subprocess.Popen[str]:
    """``supervisor run`` started as systemd starts a socket-activated service."""
    fd = held.fileno()
    argv = [sys.executable, "-c", SHIM, str(fd), "--listen", "127.0.0.1:1"]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_environ(), pass_fds=(fd,)
    )


def start_activated(held: socket.socket) -> tuple[subprocess.Popen[str], list[str]]:
    """``supervisor run`` socket-activated, and its log lines until it serves."""
    process = popen_activated(held)
    return process, read_until(process, "serving the API on")


def test_a_passed_socket_off_loopback_needs_a_nomad_cluster() -> None:
    """The embedded simulated cluster serves loopback only, whoever bound the socket."""
    with socket.create_server(("0.0.0.0", 0)) as held:  # what the refusal is about
        process = popen_activated(held)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "serving on 0.0.0.0 needs a Nomad cluster" in stderr


def test_a_restart_under_socket_activation_leaves_connections_waiting_not_refused() -> None:
    held = socket.create_server(("127.0.0.1", 0))
    port = held.getsockname()[1]
    first, lines = start_activated(held)
    try:
        # --listen says port 1: the socket systemd passed is served instead.
        assert (
            f"serving the API on http://127.0.0.1:{port} (the socket supervisor.socket passed by systemd)"
            in (lines[-1])
        )
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/version", timeout=5).status_code == 200
        stop(first)
        # No process serves: the connection is made all the same, and its request waits.
        waiting = socket.create_connection(("127.0.0.1", port), timeout=60)
        client = h11.Connection(h11.CLIENT)
        request = h11.Request(method="GET", target="/api/v1/version", headers=[("host", "api")])
        waiting.sendall(client.send(request) + client.send(h11.EndOfMessage()))
        second, _ = start_activated(held)
        try:
            event = None
            while not isinstance(event, h11.Response):
                if (event := client.next_event()) is h11.NEED_DATA:
                    client.receive_data(waiting.recv(65536))
            assert event.status_code == 200
            waiting.close()
            stop(second)
        finally:
            second.kill()
            second.communicate()
    finally:
        first.kill()
        first.communicate()
        held.close()
