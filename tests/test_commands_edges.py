"""The commands at their edges: what a client's command and variables may be (the texts of the 400
it gets back), what a /bin/sh -c command is, and how long a stop waits before it kills. Plain sync
tests; the last runs real processes with /bin/sh, as a runner would."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from supervisor.base.errors import InvalidRequest
from supervisor.core.commands import (
    MAX_COMMAND_BYTES,
    noted_command,
    pid_file,
    stop_command,
    stop_every_noted_command,
    unprivileged_command,
    validate_command,
    validate_environment,
)


def test_a_command_and_its_variables_up_to_the_limit_are_taken() -> None:
    # Each variable counts its name, its value's bytes and 4 more (quotes and the separator).
    environment = {"AB": "é" * 10}
    size_of_variables = 2 + 20 + 4
    validate_command("x" * (MAX_COMMAND_BYTES - size_of_variables), environment)


def test_one_byte_over_the_limit_is_refused_with_the_size() -> None:
    environment = {"AB": "é" * 10}
    with pytest.raises(InvalidRequest) as refused:
        validate_command("x" * (MAX_COMMAND_BYTES - 25), environment)
    assert str(refused.value) == (
        f"command and environment are {MAX_COMMAND_BYTES + 1} bytes together; "
        f"at most {MAX_COMMAND_BYTES} are taken"
    )


def test_the_command_s_bytes_count_not_its_characters() -> None:
    validate_command("é" * (MAX_COMMAND_BYTES // 2), {})
    with pytest.raises(InvalidRequest, match="100002 bytes"):
        validate_command("é" * (MAX_COMMAND_BYTES // 2 + 1), {})


def test_a_nul_byte_in_the_command_is_refused_by_name() -> None:
    with pytest.raises(InvalidRequest) as refused:
        validate_command("echo \0", {})
    assert str(refused.value) == "command must not contain NUL bytes"


def test_a_command_that_is_not_unicode_text_is_refused_by_name() -> None:
    with pytest.raises(InvalidRequest) as refused:
        validate_command("echo \udc80", {})
    assert str(refused.value) == "command is not valid Unicode text"


def test_the_variables_of_a_command_are_checked_too() -> None:
    with pytest.raises(InvalidRequest) as refused:
        validate_command("true", {"1X": "v"})
    assert str(refused.value) == "environment: '1X' is not a valid variable name"
    with pytest.raises(InvalidRequest) as refused:
        validate_command("true", {"X": "a\0b"})
    assert str(refused.value) == "environment.X must not contain NUL bytes"
    with pytest.raises(InvalidRequest) as refused:
        validate_environment({"X": "\udc80"})
    assert str(refused.value) == "environment.X is not valid Unicode text"


def test_a_command_without_nul_bytes_is_taken_whatever_else_it_holds() -> None:
    validate_command("printf 'X\\0X'; echo XX", {"X": "XX"})


@pytest.mark.parametrize(
    "argv",
    [
        ["/bin/sh", "-c"],
        ["/bin/sh", "-c", "true", "extra"],
        ["/bin/bash", "-c", "true"],
        ["/bin/sh", "-e", "true"],
    ],
)
def test_only_a_sh_c_command_can_be_noted_or_wrapped(argv: list[str]) -> None:
    with pytest.raises(ValueError, match="not a /bin/sh -c command"):
        noted_command(argv, "n1")
    with pytest.raises(ValueError, match="not a /bin/sh -c command"):
        unprivileged_command(argv, "")


def test_a_noted_command_notes_its_pid_under_its_note() -> None:
    argv = noted_command(["/bin/sh", "-c", "true"], "n1")
    assert argv[:2] == ["/bin/sh", "-c"]
    assert argv[2].startswith(f'echo $$ > "{pid_file("n1")}"; ')
    assert argv[2].endswith("; true")


@pytest.mark.parametrize(("grace", "tries"), [(0.0, 1), (0.04, 1), (0.26, 3), (2.0, 20)])
def test_a_stop_waits_in_tenths_of_a_second_at_least_once(grace: float, tries: int) -> None:
    assert f"while [ $i -lt {tries} ]" in stop_every_noted_command(grace)[2]
    assert f"while [ $i -lt {tries} ]" in stop_command("n1", grace)[2]


def _noted(script: str, note: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    return subprocess.Popen(noted_command(["/bin/sh", "-c", script], note), cwd=tmp_path, env=environ)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 10
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.01)


def test_a_left_command_gets_its_grace_to_end_and_one_that_ignores_term_is_killed(tmp_path: Path) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    graceful = _noted(
        "trap 'sleep 0.2; echo done > cleaned; exit 0' TERM; while true; do sleep 0.05; done", "g", tmp_path
    )
    stubborn = _noted("trap '' TERM; while true; do sleep 0.05; done", "s", tmp_path)
    try:
        _wait_for(tmp_path / ".supervisor-g.pid")
        _wait_for(tmp_path / ".supervisor-s.pid")
        subprocess.run(stop_every_noted_command(grace=2.0), env=environ, check=True, timeout=20)
        assert graceful.wait(timeout=10) == 0, "it ended as its TERM trap says"
        assert (tmp_path / "cleaned").read_text() == "done\n", "within its grace"
        assert stubborn.wait(timeout=10) == -9, "KILLed after the grace"
    finally:
        for process in (graceful, stubborn):
            process.kill()
            process.wait()
