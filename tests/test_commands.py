"""The shell commands run in runners, run here with /bin/sh as a runner would run them."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from supervisor.core.commands import (
    FIFO_FAILED_EXIT,
    execution_command,
    nomad_variable_names,
    noted_command,
    stderr_reader_command,
    stop_command,
    stop_every_noted_command,
    unprivileged_command,
)
from supervisor.desk.workspace import MISSING_EXIT_CODE, read_file_command


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


@pytest.mark.parametrize("privileged", [True, False])
def test_stop_ends_the_whole_process_tree(tmp_path: Path, privileged: bool) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "NOMAD_TOKEN": "secret"}
    argv = execution_command(
        "sleep 60 & echo $! > child.pid; sleep 60",
        {},
        execution_id="e1",
        privileged=privileged,
        nomad_variables=nomad_variable_names(b"NOMAD_TOKEN=secret\nPATH=/bin\n"),
        unprivileged_wrapper="env",
    )
    command = subprocess.Popen(argv, cwd=tmp_path, env=environ)
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "child.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        child = int((tmp_path / "child.pid").read_text())
        assert _alive(child)
        subprocess.run(stop_command("e1", grace=0.5), env=environ, check=True, timeout=10)
        assert command.wait(timeout=5) != 0
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not _alive(child), "the background child is stopped with its parent"
        assert not list(tmp_path.glob(".supervisor-*.pid")), "the PID file is removed"
    finally:
        command.kill()
        command.wait()


@pytest.mark.parametrize("privileged", [True, False])
@pytest.mark.parametrize(
    ("command", "code"), [("true", 0), ("exit 3", 3), ("false", 1), ("sh -c 'kill -KILL $$'", 137)]
)
def test_an_ended_command_keeps_its_exit_code_and_leaves_no_pid_file(
    tmp_path: Path, command: str, code: int, privileged: bool
) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    argv = execution_command(
        command, {}, execution_id="e3", privileged=privileged, nomad_variables=(), unprivileged_wrapper="env"
    )
    assert subprocess.run(argv, cwd=tmp_path, env=environ, timeout=10).returncode == code
    assert not list(tmp_path.glob(".supervisor-*.pid")), "every execution would leave a file behind"


def test_a_noted_file_command_keeps_its_output_and_exit_and_leaves_no_note(tmp_path: Path) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    (tmp_path / "f.txt").write_text("content")
    read = subprocess.run(
        noted_command(read_file_command("f.txt"), "n1"), cwd=tmp_path, env=environ, capture_output=True
    )
    assert (read.returncode, read.stdout) == (0, b"7\ncontent"), "the size first, then the file"
    missing = subprocess.run(noted_command(read_file_command("nope"), "n2"), cwd=tmp_path, env=environ)
    assert missing.returncode == MISSING_EXIT_CODE
    assert not list(tmp_path.glob(".supervisor-*.pid"))
    with pytest.raises(ValueError, match="not a /bin/sh -c command"):
        noted_command(["cat", "f.txt"], "n3")


def test_an_unprivileged_file_command_runs_under_the_wrapper(tmp_path: Path) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    (tmp_path / "f.txt").write_text("it's here")
    wrapped = unprivileged_command(read_file_command("f.txt"), "env MARK=wrapped")
    assert "env MARK=wrapped /bin/sh -c" in wrapped[-1]
    read = subprocess.run(noted_command(wrapped, "n4"), cwd=tmp_path, env=environ, capture_output=True)
    assert (read.returncode, read.stdout) == (0, b"9\nit's here"), "quoting survives the wrapper"
    refusing = unprivileged_command(read_file_command("f.txt"), f"sh -c 'exit {MISSING_EXIT_CODE}' --")
    assert subprocess.run(refusing, cwd=tmp_path, env=environ).returncode == MISSING_EXIT_CODE
    assert unprivileged_command(read_file_command("f.txt"), "") == read_file_command("f.txt")


def test_nomad_variables_are_unset_and_the_clients_set(tmp_path: Path) -> None:
    environ = {
        "PATH": os.environ["PATH"],
        "TMPDIR": str(tmp_path),
        "NOMAD_TOKEN": "secret",
        "NOMAD_ALLOC_ID": "a",
    }
    names = nomad_variable_names(b"NOMAD_TOKEN=secret\nNOMAD_ALLOC_ID=a\nNOMAD_BAD-NAME=x\nHOME=/\n")
    assert names == ("NOMAD_ALLOC_ID", "NOMAD_TOKEN"), "only valid names reach the script"
    argv = execution_command(
        "env", {"GREETING": "it's 'quoted' $HOME"}, execution_id="e2", privileged=True, nomad_variables=names
    )
    output = subprocess.run(
        argv, cwd=tmp_path, env=environ, capture_output=True, text=True, check=True
    ).stdout
    assert "NOMAD_" not in output
    assert "CODEOCEAN=true" in output.splitlines()
    assert "GREETING=it's 'quoted' $HOME" in output.splitlines(), "values are passed literally"


def test_every_noted_command_a_previous_run_left_is_stopped_and_nothing_else(tmp_path: Path) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    commands = [
        subprocess.Popen(
            execution_command(
                f"sleep 60 & echo $! > child-{i}.pid; sleep 60",
                {},
                execution_id=f"left-{i}",
                privileged=True,
                nomad_variables=(),
            ),
            cwd=tmp_path,
            env=environ,
        )
        for i in range(2)
    ]
    # The reader of an execution's stderr whose command never came: it waits in the fifo's open.
    commands.append(subprocess.Popen(stderr_reader_command("left-r"), cwd=tmp_path, env=environ))
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        # A shell creates the file before it writes the PID into it.
        while sum(p.read_text().strip() != "" for p in tmp_path.glob("child-*.pid")) < 2 or not list(
            tmp_path.glob("*.fifo")
        ):
            assert time.monotonic() < deadline, "the commands did not start"
            time.sleep(0.01)
        children = [int(p.read_text()) for p in tmp_path.glob("child-*.pid")]
        subprocess.run(stop_every_noted_command(grace=0.5), env=environ, check=True, timeout=10)
        for command in commands:
            assert command.wait(timeout=5) != 0
        deadline = time.monotonic() + 5
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(_alive(c) for c in children), "their background children are stopped too"
        assert not list(tmp_path.glob(".supervisor-*")), "no note, no fifo left"
        assert bystander.poll() is None, "a command nobody noted is left alone"
        done = subprocess.run(stop_every_noted_command(grace=0.5), env=environ, check=False, timeout=10)
        assert done.returncode == 0, "nothing noted: nothing to do"
    finally:
        for process in [*commands, bystander]:
            process.kill()
            process.wait()


def test_an_execution_runs_in_bash_under_the_wrapper_or_as_the_tasks_user(tmp_path: Path) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "USER": "root"}
    command = '[[ 1 == 1 ]] && echo "bash=${BASH_VERSION:+yes} user=$USER"'
    for privileged, user in [(False, "wrapped"), (True, "root")]:
        argv = execution_command(
            command,
            {},
            execution_id="b1",
            privileged=privileged,
            nomad_variables=(),
            unprivileged_wrapper="env USER=wrapped",
        )
        run = subprocess.run(argv, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=10)
        assert (run.returncode, run.stdout) == (0, f"bash=yes user={user}\n"), run.stderr
    dash = execution_command(
        "[[ 1 == 1 ]]", {}, execution_id="b2", privileged=True, nomad_variables=(), shell="/bin/sh"
    )
    assert subprocess.run(dash, env=environ, capture_output=True).returncode != 0, (
        "the shell is the setting's"
    )


@pytest.mark.parametrize("reader_first", [True, False])
def test_stderr_apart_goes_through_the_fifo_whichever_side_comes_first(
    tmp_path: Path, reader_first: bool
) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    argv = execution_command(
        "echo out; echo err >&2; echo more >/dev/stderr; exit 4",
        {},
        execution_id="f1",
        privileged=False,
        nomad_variables=(),
        unprivileged_wrapper="env",
        stderr_apart=True,
    )
    first, second = (
        (stderr_reader_command("f1"), argv) if reader_first else (argv, stderr_reader_command("f1"))
    )
    started = subprocess.Popen(first, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.2)
    assert started.poll() is None, "the first side waits for the other in the fifo's open"
    other = subprocess.run(second, env=environ, capture_output=True, timeout=10)
    out, _ = started.communicate(timeout=10)
    command, reader = (other.returncode, other.stdout), (started.returncode, out)
    if not reader_first:
        command, reader = reader, command
    assert command == (4, b"out\n"), "stdout alone, the command's exit"
    assert reader == (0, b"err\nmore\n"), "stderr, also reopened by name, on the reader's stdout"
    assert not list(tmp_path.glob(".supervisor-*")), "no fifo or note left"


@pytest.mark.parametrize("waiting", ["reader", "command"])
def test_a_stop_ends_a_side_waiting_for_the_other_and_removes_the_fifo(tmp_path: Path, waiting: str) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    argv = (
        stderr_reader_command("f2")
        if waiting == "reader"
        else execution_command(
            "echo never", {}, execution_id="f2", privileged=True, nomad_variables=(), stderr_apart=True
        )
    )
    alone = subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not list(tmp_path.glob("*.fifo")) and time.monotonic() < deadline:
        time.sleep(0.01)
    subprocess.run(stop_command("f2", grace=0.5), env=environ, check=True, timeout=10)
    out, _ = alone.communicate(timeout=5)
    assert alone.returncode != 0, "stopped in the fifo's open"
    assert out == b"", "nothing ran"
    assert not list(tmp_path.glob(".supervisor-*")), "no fifo or note left"


def test_where_no_fifo_can_be_made_the_execution_runs_nothing_and_says_so(tmp_path: Path) -> None:
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path / "missing")}
    argv = execution_command(
        "touch ran", {}, execution_id="f3", privileged=True, nomad_variables=(), stderr_apart=True
    )
    run = subprocess.run(argv, cwd=tmp_path, env=environ, capture_output=True, timeout=10)
    assert run.returncode == FIFO_FAILED_EXIT
    assert run.stderr.endswith(b"cannot make a fifo for stderr\n"), "after the PID note's own complaint"
    assert not (tmp_path / "ran").exists()
    reader = subprocess.run(stderr_reader_command("f3"), env=environ, capture_output=True, timeout=10)
    assert reader.returncode == FIFO_FAILED_EXIT, "the reader neither waits for ever"


def test_a_reader_that_cannot_make_its_fifo_leaves_no_note(tmp_path: Path) -> None:
    """A note left behind would name a PID that another process may get: the sweep must not find it."""
    environ = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path)}
    (tmp_path / ".supervisor-f4.fifo").write_text("a file, not a fifo")
    reader = subprocess.run(stderr_reader_command("f4"), env=environ, capture_output=True, timeout=10)
    assert reader.returncode == FIFO_FAILED_EXIT
    assert not list(tmp_path.glob("*.pid"))
