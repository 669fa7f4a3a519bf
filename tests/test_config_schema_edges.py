"""The Nomad connection the configuration file sets: each of its TLS and token settings reaches the
client's settings. A plain sync test on ``Settings.nomad_settings``."""

from __future__ import annotations

from pathlib import Path

from supervisor.core.config import load_settings

TOKEN = "0f4c3a3e-5b6d-11ef-8a1e-0242ac120002"


def test_the_token_and_the_tls_files_of_the_file_reach_the_nomad_client(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "[nomad]\n"
        'address = ["https://10.0.0.5:4646"]\n'
        f'token = "{TOKEN}"\n'
        'ca_cert = "/etc/nomad/ca.pem"\n'
        'client_cert = "/etc/nomad/cli.pem"\n'
        'client_key = "/etc/nomad/cli-key.pem"\n'
    )
    nomad = load_settings(path, {}).nomad_settings({"NOMAD_TOKEN": "other", "NOMAD_CACERT": "/other.pem"})
    assert nomad is not None
    assert nomad.addresses == ("https://10.0.0.5:4646",)
    assert (nomad.token, nomad.ca_cert) == (TOKEN, "/etc/nomad/ca.pem"), "the file wins over the environment"
    assert (nomad.client_cert, nomad.client_key) == ("/etc/nomad/cli.pem", "/etc/nomad/cli-key.pem")
