"""The runner's workspace as a boundary: the shell commands of file operations, and their path checks.

Students' code runs in the workspace and can plant symbolic links there, before a file command or
while it runs; the paths and contents of the next copy come from their submission. A check of the
request's text cannot see such a link, so every command checks inside the runner, as it goes:

- It enters the directory it works in from the workspace one component at a time, with ``cd -P``,
  and after each step checks with ``pwd -P`` that it is still inside the workspace. The shell then
  holds that directory itself, not its path: a link swapped in afterwards changes nothing.
- In that directory it touches one name only, with an operation that does not follow a link at that
  name: ``mv -T`` (a rename), ``rm``, ``find`` (``-P``) and ``dd iflag=nofollow``.
- A copy never enters a link: a link (or a file) where a directory is needed is replaced by a
  directory, and the new files are extracted into a fresh private directory first, then renamed into
  place, replacing whatever link stands at their name. Reads and deletes follow links that stay
  inside the workspace; a path that leads out of it is not in the workspace.

Pure functions that build argv lists and parse their output; nothing here does I/O. The commands need
GNU tar, coreutils and findutils in the runner's image (``find -printf``, ``mv -T``,
``dd iflag=nofollow``).
"""

from __future__ import annotations

import io
import posixpath
import shlex
import tarfile
from collections.abc import Sequence
from typing import Any, Final

from ..base.errors import InvalidRequest

__all__ = [
    "CLEAR_WORKSPACE",
    "DIRECTORY_EXIT_CODE",
    "ESCAPE_EXIT_CODE",
    "MISSING_EXIT_CODE",
    "delete_and_copy_command",
    "list_files_command",
    "parse_file_listing",
    "read_file_command",
    "tar_archive",
    "workspace_path",
]

# What the real client sends to mean "everything in the workspace".
CLEAR_WORKSPACE: Final = "./*"
MISSING_EXIT_CODE: Final = 66
# The path leads out of the workspace through a link.
ESCAPE_EXIT_CODE: Final = 67
# A download of a directory.
DIRECTORY_EXIT_CODE: Final = 68
# Linux's limits on a path and on one name in it, in bytes.
_PATH_MAX: Final = 4095
_NAME_MAX: Final = 255
# Eight fields per entry, each ended by a NUL: the one byte no name or link target can hold.
_FIND_FORMAT: Final = r"%y\0%s\0%T@\0%M\0%u\0%g\0%p\0%l\0"
_FIELDS: Final = 8
_ENTRY_TYPES: Final = {"f": "-", "d": "d", "l": "l", "p": "p", "s": "s", "b": "b", "c": "c"}

# Shell functions every file command starts with. W is the workspace's physical path (the task's
# working directory). ``enter`` goes from W into the directory named by its arguments, one component
# each; ``follow`` follows links that stay inside W (returns 1 for a missing directory, 2 for one
# outside W), ``make`` replaces links and files in the way by new directories and fails (exit 67)
# if a link is swapped in under it.
_PRELUDE: Final = (
    "W=$(pwd -P) || exit 70; "
    'inside() { case $(pwd -P) in "$W"|"$W"/*) return 0;; esac; return 1; }; '
    "enter() { "
    'mode=$1; shift; cd -P -- "$W" || exit 70; '
    'for c in "$@"; do '
    'if [ "$mode" = make ]; then '
    'if [ -L "$c" ] || { [ -e "$c" ] && [ ! -d "$c" ]; }; then rm -f -- "$c" || exit 71; fi; '
    '[ -d "$c" ] || mkdir -- "$c" || exit 71; '
    "fi; "
    'cd -P -- "./$c" 2>/dev/null || return 1; '
    'inside || { [ "$mode" = make ] && { echo "$c: a link was swapped in" >&2; '
    f"exit {ESCAPE_EXIT_CODE}; }}; return 2; }}; "
    "done; }; "
)


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
    try:
        encoded = posixpath.join(workspace, relative).encode()
    except UnicodeEncodeError:
        raise InvalidRequest(f"{field} is not valid Unicode text") from None
    if len(encoded) > _PATH_MAX:
        raise InvalidRequest(f"{field} is longer than {_PATH_MAX} bytes in the workspace")
    if any(len(name) > _NAME_MAX for name in encoded.split(b"/")):
        raise InvalidRequest(f"{field} has a name longer than {_NAME_MAX} bytes")
    return relative


def _components(relative: str) -> list[str]:
    return [c for c in relative.split("/") if c not in ("", ".")]


def _enter(mode: str, components: Sequence[str]) -> str:
    return " ".join(["enter", mode, *(shlex.quote(c) for c in components)])


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


def _delete_step(path: str) -> str:
    """Delete ``path`` (recursively; "." clears the workspace). The link itself goes, never its
    target; a path that leads out of the workspace has nothing in it to delete."""
    if path == ".":
        return 'cd -P -- "$W" && find . -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + || exit 72'
    *parents, name = _components(path)
    return f"if {_enter('follow', parents)}; then rm -rf -- {shlex.quote(name)} || exit 72; fi"


def _copy_steps(copies: Sequence[tuple[str, bytes | None]]) -> str:
    """Extract the tar on stdin into a fresh private directory in the workspace, then move each entry
    into place in the archive's order. A directory entry is made (and given 1777) where a link or
    file was; a file is renamed over whatever stands at its name, an empty directory included.

    The private directory is entered and checked (its physical path, our owner, mode 0700) and held
    open as fd 4, and every move reads from ``/dev/fd/4``: renaming it away and planting a link at
    its name changes nothing. It goes at the end, whatever happened (in a subshell, so that a trap
    the command has of its own stays)."""
    moves = [
        'cd -P -- "$S" && [ "$(pwd -P)" = "$S" ] && [ "$(stat -c %u:%a .)" = "$(id -u):700" ] || exit 71',
        "exec 4<. || exit 71",
        "tar --no-same-owner -x -f - || exit 72",
    ]
    for path, content in copies:
        parts = _components(path)
        if content is None:
            moves.append(f"{{ {_enter('make', parts)} && chmod 1777 .; }} || exit 71")
            continue
        *parents, name = parts
        source, target = shlex.quote(path), shlex.quote(name)
        moves.append(
            f"{{ {_enter('make', parents)} || exit 71; }}; "
            f"if [ -d {target} ] && [ ! -L {target} ]; then rmdir -- {target} 2>/dev/null || "
            f"{{ echo {shlex.quote(path + ': a directory is in the way')} >&2; exit 73; }}; fi; "
            f"mv -f -T -- /dev/fd/4/{source} {target} || exit 72"
        )
    return (
        'S=$(mktemp -d "$W/.supervisor-copy-XXXXXXXX") || exit 71; '
        f'( {"; ".join(moves)} ); r=$?; rm -rf -- "$S"; [ $r -eq 0 ] || exit $r'
    )


def delete_and_copy_command(
    deletions: Sequence[str], copies: Sequence[tuple[str, bytes | None]]
) -> list[str]:
    """argv deleting paths, then extracting the tar of ``copies`` (``tar_archive``) from stdin."""
    steps = [_delete_step(path) for path in deletions]
    copies = list(dict(copies).items())  # a path named twice: its last content, moved once
    if copies:
        steps.append(_copy_steps(copies))
    return ["/bin/sh", "-c", _PRELUDE + "; ".join(steps or ["true"])]


def _entered_or_exit(mode: str, components: Sequence[str], what: str) -> str:
    return (
        f"{_enter(mode, components)}; case $? in 0) ;; "
        f"2) echo {shlex.quote(what + ' leads out of the workspace')} >&2; exit {ESCAPE_EXIT_CODE};; "
        f"*) echo 'no such file or directory' >&2; exit {MISSING_EXIT_CODE};; esac"
    )


def list_files_command(path: str, *, recursive: bool) -> list[str]:
    """The command that lists ``path`` in the workspace (recursively or not) in a parseable form.

    Its first record says what the names are relative to: ``d`` for the directory ``path``, ``e``
    for its parent (``path`` is a file or a link, listed as itself)."""
    depth = "" if recursive else "-maxdepth 1 "
    parts = _components(path)
    *parents, name = parts or ["."]
    quoted = shlex.quote(name)
    script = (
        _PRELUDE
        + _entered_or_exit("follow", parents, path)
        + f"; if [ -L {quoted} ] || {{ [ -e {quoted} ] && [ ! -d {quoted} ]; }}; then "
        f"printf 'e\\0'; find ./{quoted} -maxdepth 0 -printf '{_FIND_FORMAT}'; "
        f"else {_entered_or_exit('follow', parts, path)}; "
        f"printf 'd\\0'; find . -mindepth 1 {depth}-printf '{_FIND_FORMAT}'; fi"
    )
    return ["/bin/sh", "-c", script]


def read_file_command(path: str) -> list[str]:
    """The command that writes the file at ``path`` to stdout after a line with its size (as
    Poseidon's download gives its ``Content-Length``); MISSING_EXIT_CODE when it is not a readable
    file, DIRECTORY_EXIT_CODE when it is a directory, ESCAPE_EXIT_CODE when a link leads it out of
    the workspace."""
    *parents, name = _components(path) or ["."]
    quoted = shlex.quote(f"./{name}")
    script = (
        _PRELUDE + _entered_or_exit("follow", parents, path) + f"; f={quoted}; "
        # The "." keeps a trailing newline of the target's name from being stripped.
        'if [ -L "$f" ]; then t=$(readlink -f -- "$f" && echo .) || exit 66; t=${t%.}; t=${t%?}; '
        f'case $t in "$W"/*) ;; *) echo {shlex.quote(path + " leads out of the workspace")} >&2; '
        f"exit {ESCAPE_EXIT_CODE};; esac; "
        'cd -P -- "${t%/*}/" 2>/dev/null && inside || exit 66; f=./${t##*/}; fi; '
        # nonblock: a file swapped for a FIFO after the test fails at once instead of waiting.
        'if [ -f "$f" ] && [ -r "$f" ]; then stat -c %s -- "$f" || exit 66; '
        'dd if="$f" iflag=nofollow,nonblock bs=65536 status=none; '
        f"elif [ -d \"$f\" ]; then echo 'is a directory' >&2; exit {DIRECTORY_EXIT_CODE}; "
        f"else echo 'no such file or not readable' >&2; exit {MISSING_EXIT_CODE}; fi"
    )
    return ["/bin/sh", "-c", script]


def parse_file_listing(
    output: bytes, path: str, *, named_as: str | None = None, recursive: bool = True
) -> list[dict[str, Any]]:
    """The FileHeader objects of a ``list_files_command`` output for ``path``; names are given from
    the workspace, with a ``./`` prefix. A listing asked for by an absolute path (``named_as``) names
    its entries as Poseidon's ``ls`` does: a file by that path, a directory's entries bare, or,
    recursively, under that path."""
    listed_as, _, rest = output.partition(b"\0")
    relative = path if listed_as == b"d" else posixpath.dirname(path) or "."
    prefix = "./" if relative == "." else f"./{relative}/"
    if named_as is not None and listed_as == b"d":
        prefix = named_as.removesuffix("/") + "/" if recursive else ""
    fields = rest.decode("utf-8", "replace").split("\0")[:-1]
    headers = []
    for start in range(0, len(fields) - _FIELDS + 1, _FIELDS):
        kind, size, mtime, mode, owner, group, name, target = fields[start : start + _FIELDS]
        header: dict[str, Any] = {
            "name": prefix + name.removeprefix("./") if named_as is None or listed_as == b"d" else named_as,
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
