"""A model of the tasks' containers for the deterministic simulation: commands without processes.

A workspace is a dictionary of paths (a file's bytes, or None for a directory); a command is a trio
task on the cluster's clock. The model understands the scripts the daemon sends (an execution, the
stop commands, ``env``, the probe ``true``; see ``core/commands.py``) by their shape, and its file
commands (``desk/workspace.py``) only word for word as it was validated against them
(``file_scripts.py``): a file command changed anywhere, its checks of the workspace's boundary
included, is an unknown script. It runs the clients' commands of a small shell language:

    echo WORDS [>&2]   cat [FILE]   sleep SECONDS   seq N   exit N   true   false

    test -t FD

joined by ``;`` and ``&&``. Anything else exits 127 with a message on stderr, as a shell does. An
execution's shell is noted under its ID as the real one notes its PID; a stop command kills what is
noted (TERM: exit status -15), the allocation stopping kills everything (KILL: -9).

A command started with ``tty`` runs on a model of a terminal: what is typed is echoed, ``\n`` is
written as ``\r\n``, stderr is merged into the output, ^D ends the input, ``test -t`` is true. An
execution whose stderr goes to its fifo and the command reading that fifo meet there, whichever
comes first, as the real fifo's two opens do; the name is gone once both met.

The model costs microseconds per command, and its outcome depends only on its input and trio's
(seeded) scheduling. It does not model a pipe's capacity: output is buffered without limit.
"""

from __future__ import annotations

import io
import re
import shlex
import tarfile
from collections.abc import Sequence
from typing import Final

import trio
import trio.testing
from attrs import define, field

from ..state.objects import SimAlloc
from ..state.store import ClusterState
from .containers import nomad_variables
from .file_scripts import Listing, Reading, Update, parse_file_script

__all__ = ["ModelContainers", "Workspace"]

_NOTE: Final = re.compile(
    r"""^(?:unset [^;]*; )?echo \$\$ > "\$\{TMPDIR:-/tmp\}/\.supervisor-(?P<id>[^".]+)\.pid"; """
    r"""(?:trap '[^']*' EXIT; )?"""
)
_STOP_ONE: Final = re.compile(r"""^S=; for N in "\$\{TMPDIR:-/tmp\}/\.supervisor-(?P<id>[^".]+)\.pid" """)
_STOP_ALL: Final = 'for N in "${TMPDIR:-/tmp}"/.supervisor-*.pid'
_EXECUTION: Final = re.compile(
    r"^export (?P<assignments>.*?); (?:\{ mkfifo [^}]*\} \|\| \{[^}]*\}; )?(?P<run>.*)$", re.DOTALL
)
_READER: Final = re.compile(r"""exec 3<"(?P<fifo>[^"]+)"; rm -f "[^"]+" "[^"]+"; exec cat <&3$""")
_MISSING_EXIT: Final = 66
_DIRECTORY_EXIT: Final = 68
_TERM: Final = -15
_KILL: Final = -9
_UNKNOWN_EXIT: Final = 127
# What a simple command returns for ``exit 0``: it ends the script, with status 0.
_EXIT_ZERO: Final = -256


@define(eq=False)
class Workspace:
    """A task's files: relative path -> content, None for a directory."""

    files: dict[str, bytes | None] = field(factory=dict)
    # Commands noted by ID, as the daemon's scripts note their shell's PID.
    noted: dict[str, _Command] = field(factory=dict)
    # The fifos whose two sides have not both opened them yet, by name.
    fifos: dict[str, _Fifo] = field(factory=dict)

    def put(self, path: str, content: bytes | None) -> None:
        """Write a file (or make a directory), with its parents."""
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            self.files["/".join(parts[:i])] = None
        self.files["/".join(parts)] = content

    def delete(self, path: str) -> None:
        """Delete a path and everything under it ("." clears the workspace)."""
        if path in (".", ""):
            self.files.clear()
            return
        for name in [p for p in self.files if p == path or p.startswith(path + "/")]:
            del self.files[name]


@define(eq=False)
class _Fifo:
    """A named pipe: its two opens wait for each other."""

    writer: trio.Event = field(factory=trio.Event)
    reader: trio.Event = field(factory=trio.Event)
    pipe: tuple[trio.abc.SendStream, trio.abc.ReceiveStream] = field(
        factory=trio.testing.memory_stream_one_way_pair
    )


@define(eq=False)
class _Command:
    """A running command: the RunningCommand the exec session sees."""

    stdin: trio.abc.SendStream
    stdout: trio.abc.ReceiveStream
    stderr: trio.abc.ReceiveStream | None
    _input: trio.abc.ReceiveStream
    _output: trio.abc.SendStream
    _errors: trio.abc.SendStream
    # On a terminal: its input as typed (echoed, then passed to _input).
    _typed: trio.abc.ReceiveStream | None = None
    _to_input: trio.abc.SendStream | None = None
    returncode: int | None = None
    _signal: int = 0
    _scope: trio.CancelScope = field(factory=trio.CancelScope)
    _done: trio.Event = field(factory=trio.Event)
    # One writer at a time on the output (a terminal's echo and the command's own).
    _writing: trio.Lock = field(factory=trio.Lock)
    # Where stderr goes instead, once redirected to a fifo.
    _stderr_to: trio.abc.SendStream | None = None
    window: tuple[int, int] = (0, 0)

    @property
    def tty(self) -> bool:
        return self._typed is not None

    def resize(self, *, height: int, width: int) -> None:
        self.window = (height, width)

    async def wait(self) -> int:
        await self._done.wait()
        assert self.returncode is not None
        return self.returncode

    def kill(self, signal: int = _KILL) -> None:
        if self.returncode is None:
            self._signal = self._signal or signal
            self._scope.cancel()

    async def reap(self) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                await stream.aclose()
        await self.wait()


def _new_command(tty: bool) -> _Command:
    stdin, reading = trio.testing.memory_stream_one_way_pair()
    writing, stdout = trio.testing.memory_stream_one_way_pair()
    errors, stderr = trio.testing.memory_stream_one_way_pair()
    if not tty:
        return _Command(stdin, stdout, stderr, reading, writing, errors)
    to_input, program_input = trio.testing.memory_stream_one_way_pair()
    return _Command(stdin, stdout, None, program_input, writing, errors, reading, to_input)


async def _terminal_input(running: _Command) -> None:
    """A terminal's line discipline, as far as the model goes: what is typed is echoed and passed
    on; ^D ends the input (not echoed)."""
    assert running._typed is not None
    assert running._to_input is not None
    while chunk := await running._typed.receive_some():
        data, eof, _ = bytes(chunk).partition(b"\x04")
        async with running._writing:
            await running._output.send_all(data.replace(b"\n", b"\r\n"))
        await running._to_input.send_all(data)
        if eof:
            break
    await running._to_input.aclose()


class ModelContainers:
    """Every task's workspace and commands, in memory."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.workspaces: dict[str, Workspace] = {}

    def workspace(self, alloc_id: str) -> Workspace:
        """The allocation's workspace (created on first use)."""
        return self.workspaces.setdefault(alloc_id, Workspace())

    async def start(
        self, alloc: SimAlloc, task: str, command: list[str], *, nursery: trio.Nursery, tty: bool = False
    ) -> _Command:
        """Start the command as a task of ``nursery`` (on a model of a terminal with ``tty``)."""
        await trio.lowlevel.checkpoint()
        running = _new_command(tty)
        nursery.start_soon(self._run, running, alloc, task, list(command))
        return running

    def reset(self, alloc: SimAlloc) -> None:
        """Kill the allocation's noted commands and forget its files."""
        for running in self.workspace(alloc.id).noted.values():
            running.kill()
        self.workspaces.pop(alloc.id, None)

    def remove_all(self) -> None:
        """Forget every workspace."""
        self.workspaces.clear()

    async def _run(self, running: _Command, alloc: SimAlloc, task: str, command: list[str]) -> None:
        workspace = self.workspace(alloc.id)
        note = ""
        try:
            with running._scope:
                if command[:2] != ["/bin/sh", "-c"] or len(command) != 3:
                    running.returncode = await _unknown(running, " ".join(command))
                    return
                script = command[2]
                if noted := _NOTE.match(script):
                    note = noted["id"]
                    workspace.noted[note] = running
                    script = script[noted.end() :]
                async with trio.open_nursery() as terminal:
                    if running.tty:
                        terminal.start_soon(_terminal_input, running)
                    running.returncode = await self._script(running, workspace, alloc, task, script)
                    terminal.cancel_scope.cancel()
        finally:
            if running.returncode is None:
                running.returncode = running._signal or _KILL
            if note and workspace.noted.get(note) is running:
                del workspace.noted[note]
            for stream in (running._output, running._errors, running._input, running._stderr_to):
                if stream is not None:
                    await trio.aclose_forcefully(stream)
            running._done.set()

    async def _script(
        self, running: _Command, workspace: Workspace, alloc: SimAlloc, task: str, script: str
    ) -> int:
        if script == "true":  # the probe of a runner whose agent restarted
            return 0
        if script == "env":
            variables = nomad_variables(self.state, alloc, task, alloc_dir=f"/alloc/{alloc.id}")
            await _write(running, "".join(f"{k}={v}\n" for k, v in variables.items()).encode())
            return 0
        if reader := _READER.search(script):
            return await _read_fifo(running, workspace, reader["fifo"])
        if executed := _EXECUTION.match(script):
            return await _execution(running, workspace, executed["run"])
        if stopped := _STOP_ONE.match(script):
            for note in (stopped["id"], f"{stopped['id']}-stderr"):
                target = workspace.noted.pop(note, None)
                if target is not None:
                    target.kill(_TERM)
                    await target.wait()
            workspace.fifos.pop(_fifo_name(stopped["id"]), None)
            return 0
        if _STOP_ALL in script:
            targets = list(workspace.noted.values())
            workspace.noted.clear()
            workspace.fifos.clear()
            for target in targets:
                target.kill(_TERM)
                await target.wait()
            return 0
        if (asked := parse_file_script(script)) is not None:
            return await _file_command(running, workspace, asked)
        return await _unknown(running, script[:80])


def _fifo_name(execution_id: str) -> str:
    return f"${{TMPDIR:-/tmp}}/.supervisor-{execution_id}.fifo"


async def _execution(running: _Command, workspace: Workspace, run: str) -> int:
    """An execution's ``[WRAPPER...] SHELL -c COMMAND [2>FIFO]``: the command, its stderr to the fifo
    once a reader opened it."""
    words = shlex.split(run)
    fifo = words.pop()[2:] if words[-1].startswith("2>") else ""
    command = words[words.index("-c") + 1]
    if fifo:
        meeting = workspace.fifos.setdefault(fifo, _Fifo())
        meeting.writer.set()
        await meeting.reader.wait()
        running._stderr_to = meeting.pipe[0]
    return await _shell(running, workspace, command)


async def _read_fifo(running: _Command, workspace: Workspace, fifo: str) -> int:
    """The reader of an execution's stderr: it meets the command at the fifo, then copies."""
    meeting = workspace.fifos.setdefault(fifo, _Fifo())
    meeting.reader.set()
    await meeting.writer.wait()
    if workspace.fifos.get(fifo) is meeting:
        del workspace.fifos[fifo]
    for note in [note for note, noted in workspace.noted.items() if noted is running]:
        del workspace.noted[note]  # its name gone with the fifo's: it ends with the command
    while chunk := await meeting.pipe[1].receive_some():
        await _write(running, chunk)
    return 0


async def _write(running: _Command, data: bytes | bytearray, *, errors: bool = False) -> None:
    if not data:
        return
    if errors and running._stderr_to is not None:
        await running._stderr_to.send_all(data)
    elif running.tty:
        async with running._writing:
            await running._output.send_all(bytes(data).replace(b"\n", b"\r\n"))
    else:
        await (running._errors if errors else running._output).send_all(data)


async def _read_all(running: _Command) -> bytes:
    chunks = []
    while chunk := await running._input.receive_some():
        chunks.append(chunk)
    return b"".join(chunks)


async def _unknown(running: _Command, what: str) -> int:
    await _write(running, f"sh: model: not a known command: {what}\n".encode(), errors=True)
    return _UNKNOWN_EXIT


async def _file_command(running: _Command, workspace: Workspace, asked: Reading | Listing | Update) -> int:
    if isinstance(asked, Update):
        return await _update(running, workspace, asked)
    if isinstance(asked, Listing):
        return await _listing(running, workspace, asked.path, recursive=asked.recursive)
    path = asked.path
    if path != "." and path not in workspace.files:
        await _write(running, b"no such file or not readable\n", errors=True)
        return _MISSING_EXIT
    content = workspace.files.get(path)
    if content is None:
        await _write(running, b"is a directory\n", errors=True)
        return _DIRECTORY_EXIT
    await _write(running, b"%d\n" % len(content) + content)
    return 0


async def _update(running: _Command, workspace: Workspace, asked: Update) -> int:
    for deleted in asked.deletions:
        workspace.delete(deleted)
    if not asked.copies:
        return 0
    archive = await _read_all(running)
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            for member in tar.getmembers():
                extracted = tar.extractfile(member) if member.isfile() else None
                workspace.put(member.name, extracted.read() if extracted is not None else None)
    except tarfile.TarError as error:
        await _write(running, f"tar: {error}\n".encode(), errors=True)
        return 72
    return 0


async def _listing(running: _Command, workspace: Workspace, path: str, *, recursive: bool) -> int:
    if path != "." and path not in workspace.files:
        await _write(running, b"no such file or directory\n", errors=True)
        return _MISSING_EXIT
    entries: list[tuple[str, bytes | None]]
    if path != "." and workspace.files[path] is not None:
        listed_as, entries = b"e", [(f"./{path.rsplit('/', 1)[-1]}", workspace.files[path])]
    else:
        prefix = "" if path == "." else path + "/"
        names = [p for p in workspace.files if p.startswith(prefix) and p != path]
        if not recursive:
            names = [p for p in names if "/" not in p[len(prefix) :]]
        listed_as, entries = b"d", [(f"./{p[len(prefix) :]}", workspace.files[p]) for p in names]
    records = [listed_as]
    for name, content in entries:
        kind, size, mode = ("d", 4096, "drwxrwxrwt") if content is None else ("f", len(content), "-rwxr--r--")
        fields = [kind, str(size), "0.0", mode, "root", "root", name, ""]
        records += [f.encode() for f in fields]
    await _write(running, b"\0".join(records) + b"\0")
    return 0


async def _shell(running: _Command, workspace: Workspace, command: str) -> int:
    """Run ``command`` of the model's shell language; its exit status."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&>")
    tokens = list(lexer)
    status = 0
    words: list[str] = []
    skipping = False
    for token in [*tokens, ";"]:
        if token not in (";", "&&"):
            words.append(token)
            continue
        if words and not skipping:
            status = await _simple(running, workspace, words)
            if status < 0:  # exit N
                return 0 if status == _EXIT_ZERO else -status
        words = []
        skipping = token == "&&" and status != 0
    return status


async def _simple(running: _Command, workspace: Workspace, words: Sequence[str]) -> int:
    """One simple command's status; ``exit N`` as -N (_EXIT_ZERO for 0), to end the script."""
    to_stderr = len(words) >= 2 and words[-2:] == [">&", "2"]
    if to_stderr:
        words = words[:-2]
    name, args = words[0], list(words[1:])
    if name == "echo":
        await _write(running, (" ".join(args) + "\n").encode(), errors=to_stderr)
        return 0
    if name == "cat" and not args:
        while chunk := await running._input.receive_some():
            await _write(running, chunk, errors=to_stderr)
        return 0
    if name == "cat":
        content = workspace.files.get(args[0].removeprefix("./"))
        if content is None:
            await _write(running, f"cat: {args[0]}: No such file or directory\n".encode(), errors=True)
            return 1
        await _write(running, content, errors=to_stderr)
        return 0
    if name == "sleep" and args:
        await trio.sleep(float(args[0]))
        return 0
    if name == "seq" and args:
        await _write(running, "".join(f"{i}\n" for i in range(1, int(args[0]) + 1)).encode())
        return 0
    if name == "exit":
        code = int(args[0]) if args else 0
        return -code if code else _EXIT_ZERO
    if name in ("true", "false"):
        return 0 if name == "true" else 1
    if name == "test" and args[:1] == ["-t"] and len(args) == 2:
        fd = args[1]
        return 0 if running.tty and (fd in ("0", "1") or (fd == "2" and running._stderr_to is None)) else 1
    await _write(running, f"sh: 1: {name}: not found\n".encode(), errors=True)
    return _UNKNOWN_EXIT
