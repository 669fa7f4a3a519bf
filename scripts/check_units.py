"""The systemd files of scripts/systemd/ as systemd reads them, in a scratch root rather than on
this machine: ``systemd-analyze verify --root`` on the service and the socket (the system's own
units copied in, and every command the units run made to exist there as docs/install.md makes it),
``systemd-sysusers --dry-run`` on the sysusers snippet, and, as root, ``systemd-sysusers`` and
``systemd-tmpfiles --create`` into the scratch root, with the owners and modes they give checked.

    python scripts/check_units.py

Verify needs no privileges; it exits 0 on a key it does not know, and only warns, so any line it
prints is a failure here. Skipped (exit 0) where ``systemd-analyze`` is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "scripts" / "systemd"
NAME = "nomad-runner-supervisor"
# The modes the tmpfiles snippet gives: only the service's group reads what holds tokens.
MODES = {f"etc/{NAME}": 0o750, f"etc/{NAME}/environment": 0o640}


class Failed(Exception):
    """A systemd tool that refused a file, or a file it made that is not as documented."""


def run(argv: list[str], *, quiet: bool = False) -> str:
    """Run ``argv``; its output, or Failed with it (any output at all, when ``quiet``)."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    said = (done.stdout + done.stderr).strip()
    print(f"   {' '.join(argv[:2])}: exit {done.returncode}", flush=True)
    if done.returncode != 0 or (quiet and said):
        raise Failed(f"{' '.join(argv)}: exit {done.returncode}\n{said}")
    return said


def commands(unit: str) -> list[str]:
    """The programs a unit's Exec*= lines start, without their prefixes (-, @, :, +, !)."""
    return [m.group(1) for m in re.finditer(r"^Exec\w+=[-@:+!]*(/\S+)", unit, flags=re.MULTILINE)]


def scratch_root(where: Path) -> Path:
    """A root with the system's units, ours, and a stub of every program our units start."""
    root = where / "root"
    system = next(p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if p.is_dir())
    shutil.copytree(system, root / "usr/lib/systemd/system", symlinks=True)
    ours = root / "etc/systemd/system"
    ours.mkdir(parents=True)
    for unit in (f"{NAME}.service", f"{NAME}.socket"):
        shutil.copy(UNITS / unit, ours / unit)
        for program in commands((UNITS / unit).read_text()):
            stub = root / program.lstrip("/")
            stub.parent.mkdir(parents=True, exist_ok=True)
            stub.write_text("#!/bin/sh\n")
            stub.chmod(0o755)
    return root


def owners(root: Path) -> None:
    """The user and group made by the sysusers snippet, and the folders by the tmpfiles one."""
    (root / "etc").mkdir(exist_ok=True)
    for name in ("passwd", "group"):
        (root / "etc" / name).touch()
    run(["systemd-sysusers", f"--root={root}", str(UNITS / f"{NAME}.sysusers")])
    groups = {
        line.split(":")[0]: int(line.split(":")[2]) for line in (root / "etc/group").read_text().splitlines()
    }
    run(["systemd-tmpfiles", f"--root={root}", "--create", str(UNITS / f"{NAME}.tmpfiles")])
    for path, mode in MODES.items():
        found = (root / path).stat()
        if (stat.S_IMODE(found.st_mode), found.st_uid, found.st_gid) != (mode, 0, groups[NAME]):
            raise Failed(
                f"/{path}: mode {stat.S_IMODE(found.st_mode):o}, owner {found.st_uid}:{found.st_gid}"
            )
    print(f"   /{', /'.join(MODES)}: root:{NAME}, {', '.join(f'{m:o}' for m in MODES.values())}", flush=True)


def main() -> int:
    if shutil.which("systemd-analyze") is None:
        print("   skipped: no systemd-analyze on this machine", flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="supervisor-units-") as where:
        try:
            root = scratch_root(Path(where))
            units = [str(root / "etc/systemd/system" / f"{NAME}.{kind}") for kind in ("service", "socket")]
            run(["systemd-analyze", "verify", f"--root={root}", "--man=no", *units], quiet=True)
            said = run(["systemd-sysusers", "--dry-run", f"--root={root}", str(UNITS / f"{NAME}.sysusers")])
            if f"Creating user '{NAME}'" not in said:
                raise Failed(f"the sysusers snippet makes no user {NAME}:\n{said}")
            if os.geteuid() == 0:
                owners(root)
            else:
                print(
                    "   tmpfiles: owners need root; only the sysusers snippet's dry run checked", flush=True
                )
        except Failed as problem:
            print(f"check_units: {problem}", file=sys.stderr, flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
