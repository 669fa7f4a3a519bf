"""The commands the daemon runs inside runners: executions, and stopping a command.

Pure functions that build argv lists and parse their output; nothing here does I/O. The file
commands, and the workspace boundary they keep, are in ``workspace.py``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Final

from ..base.errors import InvalidRequest

__all__ = [
    "FIFO_FAILED_EXIT",
    "MAX_COMMAND_BYTES",
    "NOMAD_VARIABLES_COMMAND",
    "execution_command",
    "fifo_file",
    "nomad_variable_names",
    "noted_command",
    "pid_file",
    "stderr_note",
    "stderr_reader_command",
    "stop_command",
    "stop_every_noted_command",
    "unprivileged_command",
    "validate_command",
    "validate_environment",
]

_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A command and its variables together, in bytes: the whole script is one argument of the exec, and
# Linux takes at most 128 KiB in one argument (MAX_ARG_STRLEN).
MAX_COMMAND_BYTES: Final = 100_000
# A shell function printing a process and all its descendants, read from /proc before anything dies
# (orphans are re-parented): what the stop commands signal.
_PROCESS_TREE: Final = (
    "tree() { for c in $(cat /proc/$1/task/*/children 2>/dev/null); do tree $c; done; echo $1; }; "
)
# The outer shell's exit when no fifo can be made for an execution's stderr (nothing ran).
FIFO_FAILED_EXIT: Final = 125
# Prints the task's environment, names and values; only the NOMAD_* names are kept from it
# (nomad_variable_names). Run once per allocation: they never change.
NOMAD_VARIABLES_COMMAND: Final = ["/bin/sh", "-c", "env"]


def pid_file(execution_id: str) -> str:
    """Where an execution's shell notes its PID, so that it can be stopped later."""
    return f"${{TMPDIR:-/tmp}}/.supervisor-{execution_id}.pid"


def _note_pid(note_id: str) -> str:
    """Script text noting the shell's PID under ``note_id`` for stop_command, removed at exit."""
    noted = f'"{pid_file(note_id)}"'
    return f"echo $$ > {noted}; trap 'rm -f {noted}' EXIT; "


def noted_command(argv: Sequence[str], note_id: str) -> list[str]:
    """A ``/bin/sh -c`` command that notes its PID first, so that stop_command can stop it: Nomad
    does not stop a command whose exec session broke."""
    return ["/bin/sh", "-c", _note_pid(note_id) + _script(argv)]


def unprivileged_command(argv: Sequence[str], wrapper: str) -> list[str]:
    """A ``/bin/sh -c`` command run under ``wrapper`` (for example ``/sbin/setuser user``), as an
    unprivileged execution is; unchanged when no wrapper is configured."""
    script = _script(argv)
    return ["/bin/sh", "-c", _under(wrapper, script) if wrapper else script]


def _under(wrapper: str, script: str) -> str:
    """Script text running ``script`` in a shell of its own under ``wrapper``, as its child."""
    return f"{wrapper} /bin/sh -c {shlex.quote(script)}"


def _script(argv: Sequence[str]) -> str:
    if len(argv) != 3 or list(argv[:2]) != ["/bin/sh", "-c"]:
        raise ValueError(f"not a /bin/sh -c command: {argv!r}")
    return argv[2]


def validate_environment(environment: Mapping[str, str]) -> None:
    """Refuse variable names a shell could not take, and values no process can be given."""
    for name, value in environment.items():
        if not _ENV_NAME.fullmatch(name):
            raise InvalidRequest(f"environment: {name!r} is not a valid variable name")
        _check_text(f"environment.{name}", value)


def validate_command(command: str, environment: Mapping[str, str]) -> None:
    """Refuse what could not reach the runner: NUL bytes, text that is not Unicode, and a command
    with its variables over MAX_COMMAND_BYTES."""
    _check_text("command", command)
    validate_environment(environment)
    size = len(command.encode()) + sum(len(k) + len(v.encode()) + 4 for k, v in environment.items())
    if size > MAX_COMMAND_BYTES:
        raise InvalidRequest(
            f"command and environment are {size} bytes together; at most {MAX_COMMAND_BYTES} are taken"
        )


def _check_text(field: str, text: str) -> None:
    if "\0" in text:
        raise InvalidRequest(f"{field} must not contain NUL bytes")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise InvalidRequest(f"{field} is not valid Unicode text") from None


def nomad_variable_names(env_output: bytes) -> tuple[str, ...]:
    """The ``NOMAD_*`` names in the output of ``env`` (only valid names: they go into a script)."""
    names = set()
    for line in env_output.decode("utf-8", "replace").splitlines():
        name = line.split("=", 1)[0]
        if name.startswith("NOMAD_") and "=" in line and _ENV_NAME.fullmatch(name):
            names.add(name)
    return tuple(sorted(names))


def execution_command(
    command: str,
    environment: Mapping[str, str],
    *,
    execution_id: str,
    privileged: bool,
    nomad_variables: Sequence[str],
    unprivileged_wrapper: str = "",
    shell: str = "/bin/bash",
    stderr_apart: bool = False,
) -> list[str]:
    """argv running ``command`` as ``<shell> -c <command>`` with ``CODEOCEAN=true`` and the client's
    variables, without Nomad's, as Poseidon runs it; under ``unprivileged_wrapper`` unless
    ``privileged`` (or no wrapper is configured), as the task's user then.

    Nomad gives every task ``NOMAD_*`` variables (addresses, tokens, IDs); ``nomad_variables`` names
    them and they are unset first, with a shell builtin (no process to start). The outer shell notes
    its PID, so that stopping that PID's process tree stops the command, and removes the note when
    it exits. With ``stderr_apart`` the command's stderr goes to the execution's fifo, which
    ``stderr_reader_command`` reads in a second exec: the outer shell opens it, so the wrapper's
    user needs no right to it, and the open waits for the reader (nothing is written before).
    """
    validate_environment(environment)
    unset = [name for name in nomad_variables if _ENV_NAME.fullmatch(name)]
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in {"CODEOCEAN": "true", **environment}.items())
    run = f"{shlex.quote(shell)} -c {shlex.quote(command)}"
    if unprivileged_wrapper and not privileged:
        run = f"{unprivileged_wrapper} {run}"
    if stderr_apart:
        run = _make_fifo(execution_id) + f'{run} 2>"{fifo_file(execution_id)}"'
    script = (
        (f"unset {' '.join(unset)}; " if unset else "")
        + _note_pid(execution_id)
        + f"export {assignments}; "
        + run
    )
    return ["/bin/sh", "-c", script]


def fifo_file(execution_id: str) -> str:
    """The fifo an execution's stderr goes through when kept apart from its terminal; it is removed
    as soon as both ends opened it (a stop removes what an interrupted execution left)."""
    return f"${{TMPDIR:-/tmp}}/.supervisor-{execution_id}.fifo"


def stderr_note(execution_id: str) -> str:
    """The note of the command reading an execution's stderr: stop_command stops it with the execution."""
    return f"{execution_id}-stderr"


def _make_fifo(execution_id: str, *, note: str = "") -> str:
    """Script text making the execution's fifo unless the other side made it first (both try: no
    order between the two execs, no polling); writable by the wrapper's user (a reopen of
    /dev/stderr)."""
    fifo = f'"{fifo_file(execution_id)}"'
    return (
        f"{{ [ -p {fifo} ] || mkfifo -m 622 {fifo} 2>/dev/null || [ -p {fifo} ]; }} || "
        f"{{ echo 'cannot make a fifo for stderr' >&2; {f'rm -f {note}; ' if note else ''}"
        f"exit {FIFO_FAILED_EXIT}; }}; "
    )


def stderr_reader_command(execution_id: str) -> list[str]:
    """argv, for an exec without a TTY, printing the execution's stderr on its stdout: it opens the
    fifo (which waits for the command's side), removes its name, and copies until every writer closed
    it. Its PID is noted until then, so that a stop of the execution stops it too (a reader whose
    command never started would wait for ever); once both sides opened, it ends with the command's
    process tree, and its shell becomes ``cat``."""
    fifo = f'"{fifo_file(execution_id)}"'
    note = f'"{pid_file(stderr_note(execution_id))}"'
    script = (
        f"echo $$ > {note}; "
        + _make_fifo(execution_id, note=note)
        + f"exec 3<{fifo}; rm -f {fifo} {note}; exec cat <&3"
    )
    return ["/bin/sh", "-c", script]


def stop_every_noted_command(grace: float) -> list[str]:
    """argv that stops every command noted in the runner and everything each started, as
    ``stop_command`` stops one: what a previous run of the daemon left behind when it was killed."""
    tries = max(1, round(grace * 10))
    script = _PROCESS_TREE + (
        'S=; A=; for N in "${TMPDIR:-/tmp}"/.supervisor-*.pid; do '
        'P=$(cat "$N" 2>/dev/null) || continue; rm -f "$N"; T=$(tree $P); '
        'kill -TERM $T 2>/dev/null; S="$S $P"; A="$A $T"; done; '
        'rm -f "${TMPDIR:-/tmp}"/.supervisor-*.fifo; [ -n "$S" ] || exit 0; i=0; '
        f"while [ $i -lt {tries} ]; do L=; for P in $S; do kill -0 $P 2>/dev/null && L=1; done; "
        '[ -n "$L" ] || break; sleep 0.1; i=$((i+1)); done; '
        "kill -KILL $A 2>/dev/null; true"
    )
    return ["/bin/sh", "-c", script]


def stop_command(note_id: str, grace: float) -> list[str]:
    """argv that stops a noted command and everything it started: TERM to its process tree (read
    from /proc before anything dies, since orphans are re-parented), up to ``grace`` seconds, then
    KILL. For an execution, the reader of its stderr too, and its fifo is removed."""
    tries = max(1, round(grace * 10))
    notes = f'"{pid_file(note_id)}" "{pid_file(stderr_note(note_id))}"'
    script = (
        f'S=; for N in {notes}; do P=$(cat "$N" 2>/dev/null) || continue; '
        'rm -f "$N"; S="$S $P"; done; '
        f'rm -f "{fifo_file(note_id)}"; [ -n "$S" ] || exit 0; '
        + _PROCESS_TREE
        + 'T=; for P in $S; do T="$T $(tree $P)"; done; kill -TERM $T 2>/dev/null; i=0; '
        f"while [ $i -lt {tries} ]; do L=; for P in $S; do kill -0 $P 2>/dev/null && L=1; done; "
        '[ -n "$L" ] || break; sleep 0.1; i=$((i+1)); done; '
        "kill -KILL $T 2>/dev/null; true"
    )
    return ["/bin/sh", "-c", script]
