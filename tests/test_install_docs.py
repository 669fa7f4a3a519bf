"""The install's files agree with each other and with the documents that an operator follows: the
steps of docs/install.md create what the units name, the policy docs/deployment.md shows is the
one ``supervisor check`` prints, and docs/troubleshooting.md has a section for every line
``supervisor check`` can print."""

from __future__ import annotations

import re
from pathlib import Path

from supervisor.core.config import HaSettings, NomadSection, ServerSettings, Settings
from supervisor.ops.check_token import daemon_needs, daemon_policy

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "scripts" / "systemd"
NAME = "nomad-runner-supervisor"


def unit_value(unit: str, key: str) -> str:
    values: list[str] = re.findall(rf"^{key}=(.*)$", (UNITS / unit).read_text(), flags=re.MULTILINE)
    assert len(values) == 1, f"{unit}: {key}= {len(values)} times"
    return values[0]


def shell_lines(document: str) -> list[str]:
    """The lines of the ``sh`` blocks of ``document``, continuation lines joined."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "docs" / document).read_text(), flags=re.DOTALL)
    return "\n".join(blocks).replace("\\\n", "").splitlines()


def test_the_install_steps_create_what_the_service_runs() -> None:
    program, *arguments = unit_value(f"{NAME}.service", "ExecStart").split()
    venv = Path(program).parent.parent
    steps = shell_lines("install.md")
    assert f"python3 -m venv {venv}" in steps
    assert any(line.startswith(f"{venv}/bin/pip install dist/") for line in steps), "the wheel, in it"
    config = arguments[arguments.index("--config") + 1]
    assert any(line.endswith(f"config example > {config}") for line in steps)
    for snippet, folder in (("sysusers", "sysusers.d"), ("tmpfiles", "tmpfiles.d")):
        installed = f"scripts/systemd/{NAME}.{snippet} /usr/lib/{folder}/{NAME}.conf"
        assert any(line.endswith(installed) for line in steps), snippet
        assert f"systemd-{snippet} {'--create ' if snippet == 'tmpfiles' else ''}{NAME}.conf" in steps
    assert any(f"{NAME}.service" in line and f"{NAME}.socket" in line for line in steps if "install" in line)


def test_the_snippets_make_the_user_and_the_files_the_service_names() -> None:
    (user,) = re.findall(r"^u (\S+) ", (UNITS / f"{NAME}.sysusers").read_text(), flags=re.MULTILINE)
    assert unit_value(f"{NAME}.service", "User") == unit_value(f"{NAME}.service", "Group") == user
    tmpfiles = (UNITS / f"{NAME}.tmpfiles").read_text()
    made = re.findall(r"^[df] (\S+) +\d+ root (\S+) ", tmpfiles, flags=re.MULTILINE)
    assert {group for _, group in made} == {user}
    environment = unit_value(f"{NAME}.service", "EnvironmentFile").lstrip("-")
    assert environment in {path for path, _ in made}
    config = unit_value(f"{NAME}.service", "ExecStart").split("--config ")[1].split()[0]
    assert str(Path(config).parent) in {path for path, _ in made}


def test_the_socket_listens_where_the_daemon_would_and_the_service_wants_it() -> None:
    assert unit_value(f"{NAME}.socket", "ListenStream") == f"127.0.0.1:{ServerSettings().port}"
    assert unit_value(f"{NAME}.socket", "Service") == f"{NAME}.service"
    service = (UNITS / f"{NAME}.service").read_text()
    assert f"Wants={NAME}.socket" in service
    assert f"After={NAME}.socket" in service
    assert int(unit_value(f"{NAME}.service", "LimitNOFILE")) >= 65536


def test_the_deployment_policy_is_the_one_check_prints() -> None:
    text = (ROOT / "docs" / "deployment.md").read_text()
    (policy,) = re.findall(r"```hcl\n(.*?)```", text, flags=re.DOTALL)
    assert policy.splitlines() == daemon_policy(Settings(), "default")


def test_troubleshooting_has_a_section_for_every_check() -> None:
    code = "".join(path.read_text() for path in (ROOT / "supervisor" / "ops").glob("check*.py"))
    names = set(re.findall(r'CheckResult\(\s*"([^"]+)"', code))
    every = Settings(ha=HaSettings(enabled=True), nomad=NomadSection(job_template="jobs.hcl"))
    names |= {need.label for need in daemon_needs(every)}
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    check = text.split("\n## supervisor check\n", 1)[1].split("\n## ", 1)[0]
    headings = re.findall(r"^### (.*)$", check, flags=re.MULTILINE)
    headed = {name for heading in headings for name in re.findall(r"`([^`]+)`", heading)}
    assert "token" in names
    assert headed == names


def test_the_check_script_verifies_the_units_and_installs_the_wheel() -> None:
    steps = (ROOT / "scripts" / "check.py").read_text()
    assert '("units", [python, "scripts/check_units.py"])' in steps
    assert '("install", [python, "scripts/check_install.py"])' in steps
    assert "nomad-runner-supervisor/venv" in (ROOT / "scripts" / "check_install.py").read_text()
