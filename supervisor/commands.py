"""The commands the daemon runs inside runners: executions, file operations, stopping a command.

Pure functions that build argv lists and parse their output; nothing here does I/O. Paths are
checked here: everything a client names is relative to the runner's workspace, and a path that
escapes it is an InvalidRequest, never a write elsewhere.
"""

from __future__ import annotations

import io
import posixpath
import re
import shlex
import tarfile
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .errors import InvalidRequest

__all__ = [
    "CLEAR_WORKSPACE",
    "NOMAD_VARIABLES_COMMAND",
    "delete_and_extract_command",
    "execution_command",
    "list_files_command",
    "nomad_variable_names",
    "noted_command",
    "parse_file_listing",
    "pid_file",
    "read_file_command",
    "stop_command",
    "tar_archive",
    "unprivileged_command",
    "validate_environment",
    "workspace_path",
]

# What the real client sends to mean "everything in the workspace".
CLEAR_WORKSPACE: Final = "./*"
_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FIND_FORMAT: Final = r"%y\t%s\t%T@\t%M\t%u\t%g\t%p\t%l\0"
_ENTRY_TYPES: Final = {"f": "-", "d": "d", "l": "l", "p": "p", "s": "s", "b": "b", "c": "c"}
MISSING_EXIT_CODE: Final = 66
# Prints the task's environment, names and values; only the NOMAD_* names are kept from it
# (nomad_variable_names). Run once per allocation: they never change.
NOMAD_VARIABLES_COMMAND: Final = ["/bin/sh", "-c", "env"]


def workspace_path(path: str, workspace: str, *, field: str = "path") -> str:
    """``path`` as a normalized path relative to the workspace ("." for the workspace itself)."""
    if not isinstance(path, str) or "\0" in path:
        raise InvalidRequest(f"{field} must be a string without NUL bytes")
    if path.startswith("/"):
        root = posixpath.normpath(workspace)
        absolute = posixpath.normpath(path)
        if absolute != root and not absolute.startswith(root + "/"):
            raise InvalidRequest(f"{field} {path!r} is outside the workspace {root}")
        path = posixpath.relpath(absolute, root)
    relative = posixpath.normpath(path or ".")
    if relative == ".." or relative.startswith("../"):
        raise InvalidRequest(f"{field} {path!r} escapes the workspace")
    return relative


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
    """Refuse variable names a shell could not take, and the ones the task's own environment owns."""
    for name in environment:
        if not _ENV_NAME.match(name):
            raise InvalidRequest(f"environment: {name!r} is not a valid variable name")


def nomad_variable_names(env_output: bytes) -> tuple[str, ...]:
    """The ``NOMAD_*`` names in the output of ``env`` (only valid names: they go into a script)."""
    names = set()
    for line in env_output.decode("utf-8", "replace").splitlines():
        name = line.split("=", 1)[0]
        if name.startswith("NOMAD_") and "=" in line and _ENV_NAME.match(name):
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
    unset = [name for name in nomad_variables if _ENV_NAME.match(name)]
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


def stop_command(execution_id: str, grace: float) -> list[str]:
    """argv that stops an execution and everything it started: TERM to its process tree (read from
    /proc before anything dies, since orphans are re-parented), up to ``grace`` seconds, then KILL."""
    tries = max(1, round(grace * 10))
    pid = f'"{pid_file(execution_id)}"'
    script = (
        f"P=$(cat {pid} 2>/dev/null) || exit 0; rm -f {pid}; "
        "tree() { for c in $(cat /proc/$1/task/*/children 2>/dev/null); do tree $c; done; echo $1; }; "
        "T=$(tree $P); kill -TERM $T 2>/dev/null; i=0; "
        f"while kill -0 $P 2>/dev/null && [ $i -lt {tries} ]; do sleep 0.1; i=$((i+1)); done; "
        "kill -KILL $T 2>/dev/null; true"
    )
    return ["/bin/sh", "-c", script]


def tar_archive(files: Sequence[tuple[str, bytes | None]], *, mtime: float) -> bytes:
    """A tar of (relative path, content) pairs; None content is a directory. Directories get 1777
    (anyone may create files, only owners delete them), files 0744, as the real client expects."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for path, content in files:
            info = tarfile.TarInfo(path)
            info.mtime = int(mtime)
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o1777
                archive.addfile(info)
            else:
                info.size, info.mode = len(content), 0o744
                archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def delete_and_extract_command(deletions: Sequence[str], *, extract: bool) -> list[str]:
    """argv deleting paths (recursively; "." clears the workspace), then extracting a tar from stdin."""
    steps = []
    for path in deletions:
        if path == ".":
            steps.append("rm -rf -- ./* ./.[!.]* ./..?*")
        else:
            steps.append(f"rm -rf -- {shlex.quote(path)}")
    if extract:
        steps.append("tar --no-same-owner -x -f -")
    return ["/bin/sh", "-c", " && ".join(steps) or "true"]


def list_files_command(path: str, *, recursive: bool) -> list[str]:
    """The command that lists ``path`` in the workspace (recursively or not) in a parseable form."""
    depth = "" if recursive else "-maxdepth 1 "
    quoted = shlex.quote(path)
    script = (
        f"if [ -d {quoted} ]; then find {quoted} -mindepth 1 {depth}-printf '{_FIND_FORMAT}'; "
        f"elif [ -e {quoted} ] || [ -L {quoted} ]; then find {quoted} -maxdepth 0 -printf '{_FIND_FORMAT}'; "
        f"else echo 'no such file or directory' >&2; exit {MISSING_EXIT_CODE}; fi"
    )
    return ["/bin/sh", "-c", script]


def read_file_command(path: str) -> list[str]:
    """The command that writes the file at ``path`` to stdout, or exits with MISSING_EXIT_CODE."""
    quoted = shlex.quote(path)
    script = (
        f"if [ -f {quoted} ] && [ -r {quoted} ]; then cat -- {quoted}; "
        f"else echo 'no such file or not readable' >&2; exit {MISSING_EXIT_CODE}; fi"
    )
    return ["/bin/sh", "-c", script]


def parse_file_listing(output: bytes) -> list[dict[str, Any]]:
    """The FileHeader objects of a ``list_files_command`` output; names keep their ``./`` prefix."""
    headers = []
    for record in output.split(b"\0"):
        if not record:
            continue
        kind, size, mtime, mode, owner, group, name, target = record.decode("utf-8", "replace").split("\t", 7)
        if not name.startswith(("./", "/")) and name != ".":
            name = "./" + name
        header: dict[str, Any] = {
            "name": name,
            "entryType": _ENTRY_TYPES.get(kind, "?"),
            "size": int(size),
            "modificationTime": int(float(mtime)),
            "permissions": mode[1:],
            "owner": owner,
            "group": group,
        }
        if kind == "l":
            header["linkTarget"] = target
        headers.append(header)
    return headers
