"""The install that docs/install.md describes, done outside the checkout: the wheel and the sdist
built (``python -m build``, the wheel from the sdist), a fresh virtual environment in a temporary
folder, the wheel installed there as a user installs it (not editable; pip fetches the
dependencies), then, from a folder outside the checkout and with the installed commands only:
``--version`` under both names, ``config example`` (loaded by ``check --config``), ``check`` on the
embedded cluster, and the README's walk-through against ``supervisor run``, its output asserted.

    python scripts/check_install.py [--keep]

An editable install finds any file of the checkout; this one finds only what the wheel holds.
Exits 0 when every step passed, 1 with the step that failed; ``--keep`` leaves the temporary folder.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where docs/install.md puts the virtual environment, and where the unit's ExecStart finds it.
VENV = Path("opt/nomad-runner-supervisor/venv")
# What the README says the walk-through prints, in this order.
WALK_THROUGH_ENDS = [
    '{"type":"start"}',
    '{"type":"stdout","data":"Hello, runner!\\r\\n"}',
    '{"type":"exit","data":0}',
    "204",
]


class Failed(Exception):
    """A step whose outcome is not the one expected."""


def step(name: str, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run ``argv``; its stdout, or Failed with what it printed."""
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    print(f"   {name}: exit {done.returncode} ({time.monotonic() - started:.1f} s)", flush=True)
    if done.returncode != 0:
        raise Failed(f"{name}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.stdout


def installed_environment(venv: Path) -> dict[str, str]:
    """The environment of a user of the install: its commands first on PATH, nothing of the
    checkout's or of the developer's virtual environment, no Nomad configured."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        and not k.startswith(("NOMAD_", "SUPERVISOR_"))
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def walk_through_block() -> str:
    """The README's walk-through: the first ``sh`` block of its "Using it" section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Using it\n", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    if match is None:
        raise Failed("README.md: no sh block under 'Using it'")
    return match.group(1)


def build(scratch: Path) -> Path:
    """The sdist and the wheel built from it; the wheel's path."""
    dist = scratch / "dist"
    step(
        "build",
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        cwd=scratch,
        env=dict(os.environ),
    )
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    print(f"   built {sdist.name}, {wheel.name}", flush=True)
    return wheel


def install(scratch: Path, wheel: Path) -> Path:
    """A fresh virtual environment at the path the unit names, under ``scratch``, with the wheel."""
    venv = scratch / "root" / VENV
    env = installed_environment(venv)
    step("venv", [sys.executable, "-m", "venv", str(venv)], cwd=scratch, env=env)
    step("pip install", [str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)], cwd=scratch, env=env)
    where = step(
        "import",
        [str(venv / "bin" / "python"), "-c", "import supervisor; print(supervisor.__file__)"],
        cwd=scratch,
        env=env,
    )
    if not Path(where.strip()).is_relative_to(venv):
        raise Failed(f"the package imported is not the installed one: {where.strip()}")
    return venv


def commands(work: Path, venv: Path) -> None:
    """``--version`` under both names, ``config example`` and ``check`` on the embedded cluster."""
    env = installed_environment(venv)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name in ("supervisor", "nomad-runner-supervisor"):
        said = step(f"{name} --version", [name, "--version"], cwd=work, env=env).strip()
        if said != f"supervisor {version}":
            raise Failed(f"{name} --version says {said!r}, the package is {version}")
    example = step("supervisor config example", ["supervisor", "config", "example"], cwd=work, env=env)
    tomllib.loads(example)
    (work / "config.toml").write_text(example)
    checked = step("supervisor check", ["supervisor", "check", "--config", "config.toml"], cwd=work, env=env)
    if not re.search(r"^\d+ OK, \d+ warnings, 0 failed, 0 skipped$", checked, flags=re.MULTILINE):
        raise Failed(f"supervisor check did not pass every check:\n{checked}")


def serving(process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> str:
    """The API's address once ``supervisor run`` logs that it serves."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if match := re.search(r"serving the API on (\S+)", log.read_text()):
            return match.group(1)
        if process.poll() is not None:
            raise Failed(f"supervisor run exited with {process.returncode}:\n{log.read_text()}")
        time.sleep(0.1)
    raise Failed(f"supervisor run did not serve within {timeout:.0f} s:\n{log.read_text()}")


def walk_through(work: Path, venv: Path) -> None:
    """The README's walk-through against ``supervisor run``, as a user runs it from the folder that
    holds ``.venv``; the daemon on a free port rather than 7200, which another may hold."""
    env = installed_environment(venv)
    (work / ".venv").symlink_to(venv)
    log = work / "run.log"
    started = time.monotonic()
    with log.open("w") as sink:
        process = subprocess.Popen(
            ["supervisor", "run", "--listen", "127.0.0.1:0"], cwd=work, env=env, stdout=sink, stderr=sink
        )
    try:
        address = serving(process, log)
        print(f"   supervisor run: serving on {address} ({time.monotonic() - started:.1f} s)", flush=True)
        script = walk_through_block().replace("http://127.0.0.1:7200", address)
        out = step("walk-through", ["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, timeout=120)
        lines = out.splitlines()
        if lines[-len(WALK_THROUGH_ENDS) :] != WALK_THROUGH_ENDS or lines[:1] not in (["201"], ["204"]):
            raise Failed(f"the walk-through printed:\n{out}")
        print(f"   walk-through printed {len(lines)} lines as the README shows", flush=True)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
    if code != 0:
        raise Failed(f"supervisor run exited {code} on SIGTERM:\n{log.read_text()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--keep", action="store_true", help="leave the temporary folder and say where")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="supervisor-install-"))
    work = scratch / "work"
    work.mkdir()
    try:
        venv = install(scratch, build(scratch))
        commands(work, venv)
        walk_through(work, venv)
    except (Failed, subprocess.TimeoutExpired, ValueError) as problem:
        print(f"check_install: {problem}", file=sys.stderr, flush=True)
        return 1
    finally:
        if args.keep:
            print(f"   kept {scratch}", flush=True)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
