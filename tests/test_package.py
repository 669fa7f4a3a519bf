"""The package's public surface and its command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

import supervisor
import supervisor.errors
import supervisor.nomad
from supervisor.cli import main


@pytest.mark.parametrize("module", [supervisor, supervisor.nomad, supervisor.errors])
def test_exported_members_exist_and_are_sorted(module: object) -> None:
    exported = module.__all__  # type: ignore[attr-defined]
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n))
    for name in exported:
        assert hasattr(module, name), f"{module.__name__}.{name} is exported but missing"  # type: ignore[attr-defined]


def test_every_error_descends_from_one_root() -> None:
    for name in supervisor.errors.__all__:
        assert issubclass(getattr(supervisor.errors, name), supervisor.errors.SupervisorError)


def test_transient_and_terminal_errors_are_disjoint() -> None:
    errors = [getattr(supervisor.errors, name) for name in supervisor.errors.__all__]
    for error in errors:
        assert not (
            issubclass(error, supervisor.errors.TransientError)
            and issubclass(error, supervisor.errors.TerminalError)
        ), error


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"supervisor {supervisor.__version__}"


def test_python_dash_m_runs_the_same_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"supervisor {supervisor.__version__}"
