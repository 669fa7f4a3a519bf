"""The command model answers the daemon's scripts as /bin/sh in a real workspace does: each case
runs through ProcessContainers and ModelContainers, and the two must agree (exit status, output)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from supervisor.core.commands import NOMAD_VARIABLES_COMMAND, execution_command, noted_command, stop_command
from supervisor.desk.workspace import (
    delete_and_copy_command,
    list_files_command,
    parse_file_listing,
    read_file_command,
    tar_archive,
)
from supervisor.simulator import SimConfig
from supervisor.simulator.agents.command_model import ModelContainers
from supervisor.simulator.agents.containers import Containers, ProcessContainers
from supervisor.simulator.state.objects import SimAlloc
from supervisor.simulator.state.store import ClusterState

ALLOC = SimAlloc(
    id="a1",
    namespace="default",
    eval_id="e1",
    name="10-r.default-group[0]",
    node_id="n1",
    node_name="worker-01",
    job_id="10-r",
    job={},
    job_version=0,
    task_group="default-group",
    tasks=["default-task"],
    host_ip="10.0.1.10",
)


class _Timers:
    def call_later(self, delay: float, callback: object) -> object:
        return lambda: None


def _state() -> ClusterState:
    return ClusterState(SimConfig(), _Timers(), trio.current_time)  # type: ignore[arg-type]


async def _run(
    containers: Containers, nursery: trio.Nursery, argv: Sequence[str], stdin: bytes = b""
) -> tuple[int, bytes, bytes]:
    running = await containers.start(ALLOC, "default-task", list(argv), nursery=nursery)
    out: list[bytes] = []
    err: list[bytes] = []

    async def drain(stream: trio.abc.ReceiveStream | None, into: list[bytes]) -> None:
        assert stream is not None
        while chunk := await stream.receive_some():
            into.append(bytes(chunk))

    async with trio.open_nursery() as pumps:
        pumps.start_soon(drain, running.stdout, out)
        pumps.start_soon(drain, running.stderr, err)
        assert running.stdin is not None
        if stdin:
            await running.stdin.send_all(stdin)
        await running.stdin.aclose()
        code = await running.wait()
    await running.reap()
    return code, b"".join(out), b"".join(err)


def _execution(command: str, execution_id: str = "x1") -> list[str]:
    return execution_command(command, {}, execution_id=execution_id, privileged=True, nomad_variables=())


# What each copy of SCRIPT puts into the workspace (its tar goes to the command's stdin).
COPIES: dict[str, list[tuple[str, bytes | None]]] = {
    "copy": [("main.py", b"print(1)\n"), ("src", None), ("src/a.txt", b"A")],
    "copy names a shell would read otherwise": [("odd dir/it's -n.txt", b"odd"), ("odd dir/$x;", b"")],
}
ODD = "odd dir/it's -n.txt"

SCRIPT = [
    ("copy", delete_and_copy_command([], COPIES["copy"])),
    (
        "copy names a shell would read otherwise",
        delete_and_copy_command(["gone"], COPIES["copy names a shell would read otherwise"]),
    ),
    ("echo", _execution("echo hello world")),
    ("stderr", _execution("echo oops >&2; exit 3")),
    ("stdin", _execution("cat")),
    ("cat a file", _execution("cat main.py && echo done")),
    ("cat a missing file", _execution("cat nothing.py && echo not reached")),
    ("seq", _execution("seq 5; true")),
    ("exit 0", _execution("echo before; exit 0; echo after")),
    ("unknown", _execution("frobnicate")),
    ("list", noted_command(list_files_command(".", recursive=True), "n1")),
    ("list src", noted_command(list_files_command("src", recursive=False), "n2")),
    ("list a file", noted_command(list_files_command("main.py", recursive=False), "n3")),
    ("list missing", noted_command(list_files_command("none", recursive=False), "n4")),
    ("read", noted_command(read_file_command("src/a.txt"), "n5")),
    ("read a directory", noted_command(read_file_command("src"), "n6")),
    ("read missing", noted_command(read_file_command("none"), "n7")),
    ("read an odd name", noted_command(read_file_command(ODD), "n9")),
    ("read the workspace", noted_command(read_file_command("."), "n10")),
    ("list odd dir", noted_command(list_files_command("odd dir", recursive=True), "n11")),
    ("list an odd name", noted_command(list_files_command(ODD, recursive=False), "n12")),
    ("delete", delete_and_copy_command(["src"], [])),
    ("list after delete", noted_command(list_files_command(".", recursive=True), "n8")),
    ("delete an odd name", delete_and_copy_command([ODD, "odd dir/none"], [])),
    ("list odd dir after delete", noted_command(list_files_command("odd dir", recursive=True), "n13")),
    ("nothing to do", delete_and_copy_command([], [])),
    ("clear", delete_and_copy_command(["."], [])),
    ("list after clear", noted_command(list_files_command(".", recursive=True), "n14")),
]


def _comparable(name: str, argv: Sequence[str], result: tuple[int, bytes, bytes]) -> object:
    code, out, err = result
    if name.startswith("list") and code == 0:
        path = {"list src": "src", "list a file": "main.py", "list an odd name": ODD}.get(name, ".")
        path = "odd dir" if name.startswith("list odd dir") else path
        entries = parse_file_listing(out, path)
        return code, sorted((e["name"], e["entryType"], e["entryType"] != "d" and e["size"]) for e in entries)
    if name == "unknown":
        return code, out, bool(err)
    return code, out, err


async def test_the_model_answers_the_daemons_scripts_as_a_shell_does(tmp_path: Path) -> None:
    state = _state()
    real = ProcessContainers(state, tmp_path)
    model = ModelContainers(state)
    async with trio.open_nursery() as nursery:
        for name, argv in SCRIPT:
            stdin = b"from stdin\n" if name == "stdin" else b""
            if name in COPIES:
                stdin = tar_archive(COPIES[name], mtime=0)
            expected = _comparable(name, argv, await _run(real, nursery, argv, stdin))
            got = _comparable(name, argv, await _run(model, nursery, argv, stdin))
            assert got == expected, name


async def test_the_nomad_variables_command_prints_nomad_variables() -> None:
    model = ModelContainers(_state())
    async with trio.open_nursery() as nursery:
        code, out, _ = await _run(model, nursery, NOMAD_VARIABLES_COMMAND)
    assert code == 0
    assert b"NOMAD_ALLOC_ID=a1\n" in out


async def test_a_stop_command_stops_the_noted_execution(autojump_clock: trio.abc.Clock) -> None:
    model = ModelContainers(_state())
    async with trio.open_nursery() as nursery:
        sleeping = await model.start(ALLOC, "default-task", _execution("sleep 1000", "long"), nursery=nursery)
        await trio.sleep(1)
        assert sleeping.returncode is None
        code, _, _ = await _run(model, nursery, stop_command("long", grace=1.0))
        assert code == 0
        assert await sleeping.wait() == -15
        assert trio.current_time() < 2


@pytest.mark.parametrize("how", ["reset", "kill"])
async def test_a_stopped_allocation_kills_its_commands(how: str, autojump_clock: trio.abc.Clock) -> None:
    model = ModelContainers(_state())
    async with trio.open_nursery() as nursery:
        sleeping = await model.start(ALLOC, "default-task", _execution("sleep 1000"), nursery=nursery)
        await trio.sleep(1)
        if how == "reset":
            model.reset(ALLOC)
        else:
            sleeping.kill()
        assert await sleeping.wait() == -9


# Each way of switching a boundary check off: the scripts still run in a shell, but the model was not
# validated against them.
ALTERED = [
    (
        "the prelude takes every directory for inside",
        """inside() { case $(pwd -P) in "$W"|"$W"/*) return 0;; esac; return 1; }; """,
        "inside() { return 0; }; ",
    ),
    ("a download follows a link anywhere", 'case $t in "$W"/*) ;;', "case $t in *) ;;"),
    ("a download follows a link at its name", "iflag=nofollow,nonblock", "iflag=nonblock"),
    ("a copy writes through a link", 'if [ -L "$c" ] ||', "if false ||"),
]
DAEMON_SCRIPTS = [
    delete_and_copy_command(["a/b"], [("c/d", b"x")]),
    list_files_command("a/b", recursive=True),
    read_file_command("a/b"),
]


@pytest.mark.parametrize(("why", "old", "new"), ALTERED, ids=[why for why, _, _ in ALTERED])
async def test_a_file_command_changed_anywhere_is_an_unknown_script(why: str, old: str, new: str) -> None:
    model = ModelContainers(_state())
    altered = [[*argv[:2], argv[2].replace(old, new)] for argv in DAEMON_SCRIPTS if old in argv[2]]
    assert altered, f"no daemon script holds {old!r}"
    async with trio.open_nursery() as nursery:
        for argv in altered:
            code, out, err = await _run(model, nursery, argv, tar_archive([("c/d", b"x")], mtime=0))
            assert (code, out) == (127, b""), why
            assert b"not a known command" in err
