"""The alert rules as Prometheus reads them: ``promtool check rules`` on alerts.yml, then ``promtool
test rules`` on alerts.test.yml, the unit tests of every rule.

    python scripts/monitoring/check_rules.py

promtool comes with Debian's ``prometheus`` package (2.42 on Debian 12), as does the ``prometheus``
the tests start. When it is missing and this runs as root on a system with apt, the package is
installed; otherwise the script fails with the command that installs it. The package's maintainer
script enables its service at boot and starts it, through ``invoke-rc.d`` (or ``deb-systemd-invoke``
under systemd); both ask ``/usr/sbin/policy-rc.d`` before they start anything, so one that forbids
every action (exit 101, as Debian's policy-rc.d interface defines it) is put in place for the
install, the one there before put back after, and ``update-rc.d`` then disables the service at boot.
No prometheus process is left running: the script checks that none started meanwhile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE / "alerts.yml"
RULE_TESTS = HERE / "alerts.test.yml"
INSTALL = ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"]
POLICY = Path("/usr/sbin/policy-rc.d")
# Debian's policy-rc.d interface: 101 is "action forbidden by policy".
FORBID_ALL = "#!/bin/sh\n# Keeps the service of the prometheus being installed from starting.\nexit 101\n"
PROMETHEUS_BINARY = "/usr/bin/prometheus"


class Failed(Exception):
    """promtool is missing and cannot be installed here, or a command failed."""


def run(argv: list[str]) -> None:
    """Run ``argv`` with its output shown; Failed when it fails."""
    print(f"   {' '.join(argv)}", flush=True)
    code = subprocess.run(argv, check=False).returncode
    if code != 0:
        raise Failed(f"{' '.join(argv)}: exit {code}")


@contextmanager
def services_forbidden() -> Iterator[None]:
    """``policy-rc.d`` forbids every service action while the block runs; the file there before
    (or none) is back afterwards."""
    saved = POLICY.with_name("policy-rc.d.before-prometheus")
    had_one = POLICY.exists()
    if had_one:
        POLICY.rename(saved)
    POLICY.write_text(FORBID_ALL)
    POLICY.chmod(0o755)
    try:
        yield
    finally:
        POLICY.unlink()
        if had_one:
            saved.rename(POLICY)


def prometheus_processes() -> set[int]:
    """The processes running Debian's prometheus binary."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "exe") == PROMETHEUS_BINARY:
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def install_prometheus() -> None:
    """Debian's prometheus package, its service neither started nor enabled at boot."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Failed(
            "promtool is missing: install Debian's prometheus package (sudo "
            f"{' '.join(INSTALL)}), or run scripts/check.py as root, which installs it"
        )
    before = prometheus_processes()
    environ = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with services_forbidden():
        if subprocess.run(INSTALL, env=environ, check=False).returncode != 0:
            # A fresh system has no package lists yet.
            run(["apt-get", "update"])
            print(f"   {' '.join(INSTALL)}", flush=True)
            if subprocess.run(INSTALL, env=environ, check=False).returncode != 0:
                raise Failed(f"{' '.join(INSTALL)} failed")
    # The maintainer script enabled it at boot; update-rc.d disables the System V links and, through
    # systemctl, the systemd unit's.
    if shutil.which("update-rc.d"):
        subprocess.run(["update-rc.d", "prometheus", "disable"], check=False, capture_output=True)
    started = prometheus_processes() - before
    if started:
        raise Failed(f"the install started prometheus (pid {', '.join(map(str, sorted(started)))}): stop it")


def main() -> int:
    try:
        if shutil.which("promtool") is None:
            install_prometheus()
        run(["promtool", "--version"])
        run(["promtool", "check", "rules", str(RULES)])
        run(["promtool", "test", "rules", str(RULE_TESTS)])
    except Failed as failed:
        print(f"check_rules: {failed}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
