"""The package's public surface and its command line."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
import trio

import supervisor
import supervisor.base.errors
import supervisor.nomad
from supervisor.api.app import create_app
from supervisor.cli import main
from supervisor.core.config import ServerSettings, Settings
from supervisor.desk.service import RunnerService

from .nomad_double import NomadDouble

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


def test_the_version_is_the_installed_packages_and_the_projects() -> None:
    installed = importlib.metadata.version("nomad-runner-supervisor")
    assert supervisor.__version__ == installed
    assert installed == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


async def version_answer(nursery: trio.Nursery, settings: Settings) -> httpx.Response:
    app = create_app(RunnerService(NomadDouble(), settings, execution_nursery=nursery), settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        return await http.get("/api/v1/version")


async def test_the_api_reports_the_installed_version_unless_one_is_configured(nursery: trio.Nursery) -> None:
    answer = await version_answer(nursery, Settings())
    assert (answer.status_code, answer.json()) == (200, importlib.metadata.version("nomad-runner-supervisor"))
    configured = await version_answer(nursery, Settings(server=ServerSettings(version="poseidon-1.2")))
    assert configured.json() == "poseidon-1.2"


def test_the_changelog_names_the_version_and_the_license_is_mit() -> None:
    version = importlib.metadata.version("nomad-runner-supervisor")
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    assert headings[0] == version, "the newest section is the version the package reports"
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n")
    assert "the nomad-runner-supervisor authors" in license_text


def test_the_wheel_holds_every_file_the_package_reads() -> None:
    """The wheel takes the folders setuptools finds as packages (those with an ``__init__.py``)
    and their modules only: a folder without one, or a file other than Python, would be missing
    from an installed daemon while an editable install still found it."""
    package = ROOT / "supervisor"
    for folder in [package, *(p for p in package.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        assert (folder / "__init__.py").is_file(), f"{folder.relative_to(ROOT)}: no package, not in the wheel"
    for file in package.rglob("*"):
        if file.is_file() and "__pycache__" not in file.parts:
            assert file.suffix == ".py", f"{file.relative_to(ROOT)} is package data the wheel lacks"


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
