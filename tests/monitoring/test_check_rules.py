"""The monitoring step's install guard (``scripts/monitoring/check_rules.py``): ``policy-rc.d``
forbids every service action only while the package installs, whatever was there before, and
without promtool or root the step fails with the command that installs it. The install itself runs
in ``scripts/check.py`` as root; here nothing is installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "monitoring" / "check_rules.py"


@pytest.fixture
def check_rules(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_rules_under_test", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "POLICY", tmp_path / "policy-rc.d")
    return module


def test_policy_forbids_every_action_during_the_block_and_is_put_back(check_rules: ModuleType) -> None:
    policy: Path = check_rules.POLICY
    policy.write_text("#!/bin/sh\nexit 0\n")
    with check_rules.services_forbidden():
        assert subprocess.run([str(policy), "prometheus", "start"], check=False).returncode == 101
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"
    assert sorted(p.name for p in policy.parent.iterdir()) == ["policy-rc.d"]


def test_no_policy_before_means_none_after(check_rules: ModuleType) -> None:
    policy: Path = check_rules.POLICY
    with pytest.raises(RuntimeError), check_rules.services_forbidden():
        assert policy.exists()
        raise RuntimeError("the install failed")
    assert not policy.exists()


def test_without_root_it_names_the_command(
    check_rules: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(check_rules.shutil, "which", lambda name: None)
    monkeypatch.setattr(check_rules.os, "geteuid", lambda: 1000)
    assert check_rules.main() == 1
    said = capsys.readouterr().err
    assert "apt-get install -y --no-install-recommends prometheus" in said
    assert "scripts/check.py as root" in said
    assert not check_rules.POLICY.exists()
