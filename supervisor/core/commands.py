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
    "MAX_COMMAND_BYTES",
    "NOMAD_VARIABLES_COMMAND",
    "execution_command",
    "nomad_variable_names",
    "noted_command",
    "pid_file",
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
) -> list[str]:
    """argv running ``command`` with ``CODEOCEAN=true`` and the client's variables, without Nomad's.

    Nomad gives every task ``NOMAD_*`` variables (addresses, tokens, IDs); ``nomad_variables`` names
    them and they are unset first, with a shell builtin (no process to start). The shell notes its
    PID, so that stopping that PID's process tree stops the command, and removes the note when it
    exits. It runs the command itself (``eval``), or, with an unprivileged wrapper, as its child.
    """
    validate_environment(environment)
    unset = [name for name in nomad_variables if _ENV_NAME.fullmatch(name)]
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in {"CODEOCEAN": "true", **environment}.items())
    if privileged or not unprivileged_wrapper:
        run = f"eval {shlex.quote(command)}"
    else:
        run = _under(unprivileged_wrapper, command)
    script = (
        (f"unset {' '.join(unset)}; " if unset else "")
        + _note_pid(execution_id)
        + f"export {assignments}; "
        + run
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
        '[ -n "$S" ] || exit 0; i=0; '
        f"while [ $i -lt {tries} ]; do L=; for P in $S; do kill -0 $P 2>/dev/null && L=1; done; "
        '[ -n "$L" ] || break; sleep 0.1; i=$((i+1)); done; '
        "kill -KILL $A 2>/dev/null; true"
    )
    return ["/bin/sh", "-c", script]


def stop_command(execution_id: str, grace: float) -> list[str]:
    """argv that stops an execution and everything it started: TERM to its process tree (read from
    /proc before anything dies, since orphans are re-parented), up to ``grace`` seconds, then KILL."""
    tries = max(1, round(grace * 10))
    pid = f'"{pid_file(execution_id)}"'
    script = (
        f"P=$(cat {pid} 2>/dev/null) || exit 0; rm -f {pid}; "
        + _PROCESS_TREE
        + "T=$(tree $P); kill -TERM $T 2>/dev/null; i=0; "
        f"while kill -0 $P 2>/dev/null && [ $i -lt {tries} ]; do sleep 0.1; i=$((i+1)); done; "
        "kill -KILL $T 2>/dev/null; true"
    )
    return ["/bin/sh", "-c", script]
