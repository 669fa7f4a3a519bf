"""The package's public surface and its command line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import supervisor
import supervisor.base.errors
import supervisor.nomad
from supervisor.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("module", [supervisor, supervisor.nomad, supervisor.base.errors])
def test_exported_members_exist_and_are_sorted(module: object) -> None:
    exported = module.__all__  # type: ignore[attr-defined]
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n))
    for name in exported:
        assert hasattr(module, name), f"{module.__name__}.{name} is exported but missing"  # type: ignore[attr-defined]


def test_every_error_descends_from_one_root() -> None:
    for name in supervisor.base.errors.__all__:
        member = getattr(supervisor.base.errors, name)
        if isinstance(member, type):
            assert issubclass(member, supervisor.base.errors.SupervisorError), name


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    direct: list[type] = type.__subclasses__(cls)
    for sub in direct:
        found += [sub, *_subclasses(sub)]
    return found


def test_every_error_of_the_tree_lives_in_errors_py_and_its_docstring() -> None:
    import supervisor.simulator
    import supervisor.tree.daemon  # every module of the package, imported

    tree = supervisor.base.errors.__doc__ or ""
    for cls in _subclasses(supervisor.base.errors.SupervisorError):
        assert cls.__module__ == "supervisor.base.errors", (
            f"{cls.__module__}.{cls.__name__} is outside errors.py"
        )
        assert cls.__name__ in supervisor.base.errors.__all__, cls.__name__
        assert f" {cls.__name__} " in tree, f"{cls.__name__} is missing from the tree in the docstring"


def test_transient_and_terminal_errors_are_disjoint() -> None:
    errors = [getattr(supervisor.base.errors, name) for name in supervisor.base.errors.__all__]
    for error in [e for e in errors if isinstance(e, type)]:
        assert not (
            issubclass(error, supervisor.base.errors.TransientError)
            and issubclass(error, supervisor.base.errors.TerminalError)
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


def test_the_check_script_ends_with_a_summary_of_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("check", ROOT / "scripts" / "check.py")
    assert spec is not None
    assert spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    python = sys.executable
    steps = [
        ("first", [python, "-c", "pass"]),
        ("second", [python, "-c", "raise SystemExit(3)"]),
        ("third", [python, "-c", "pass"]),
    ]
    assert check.run_steps(steps) == 3
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("== summary: first ok (")
    assert "second FAILED (exit 3, " in last
    assert last.endswith("third not run")
