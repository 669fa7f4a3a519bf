"""The container's files as Poseidon reads them: an absolute path outside the workspace.

Poseidon lists any path with ``ls -l --time-style=+%s -1 --literal [--recursive]`` and turns the
output into FileHeaders line by line (its ``pkg/nullio/ls2json.go``); it reads a file with ``cat``
after an ``ls`` line that gives its size (``content_length.go``). Both run under the user the request
runs as, so the operating system's permissions decide what is shown. The same command and the same
reading of its output here give the same listing: entries in ``ls``'s order, without hidden names,
a non-recursive listing's names bare, a recursive one's prefixed by the directory that ``ls`` names
(``/`` lists ``/bin``, ``/etc``, ...), and a file by its path as given.

Pure functions that build argv lists and parse their output; nothing here does I/O.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Any, Final

from ..base.errors import InvalidRequest

__all__ = [
    "LISTING_COMMAND",
    "container_path",
    "list_container_command",
    "parse_ls_listing",
    "read_container_file_command",
]

LISTING_COMMAND: Final = "ls -l --time-style=+%s -1 --literal"
# Poseidon's two expressions (ls2json.go): a directory's header line, and an entry's line.
_PATH_LINE: Final = re.compile(r"(.*):")
_HEADER_LINE: Final = re.compile(
    r"([-aAbcCdDlMnpPsw?])([-rwxXsStT]{9})(\+?) +\d+ +(.+?) +(.+?) +(\d+) +(\d+) +(.*)$"
)
_LINK_ARROW: Final = " -> "
# Linux's limit on a path, in bytes.
_PATH_MAX: Final = 4095
_MISSING_EXIT_CODE: Final = 66
_DIRECTORY_EXIT_CODE: Final = 68


def container_path(path: str, workspace: str, *, field: str = "path") -> str | None:
    """``path`` if it is absolute and outside the workspace (the container's, read as Poseidon
    reads it); None for a path that is the workspace's (relative, or absolute inside it)."""
    if not path.startswith("/"):
        return None
    root = posixpath.normpath(workspace)
    absolute = posixpath.normpath(path)
    if absolute == root or absolute.startswith(root + "/"):
        return None
    if "\0" in path:
        raise InvalidRequest(f"{field} must be a string without NUL bytes")
    try:
        encoded = path.encode()
    except UnicodeEncodeError:
        raise InvalidRequest(f"{field} is not valid Unicode text") from None
    if len(encoded) > _PATH_MAX:
        raise InvalidRequest(f"{field} is longer than {_PATH_MAX} bytes")
    return path


def list_container_command(path: str, *, recursive: bool) -> list[str]:
    """Poseidon's listing command for ``path``."""
    options = f"{LISTING_COMMAND} --recursive" if recursive else LISTING_COMMAND
    return ["/bin/sh", "-c", f"{options} -- {shlex.quote(path)}"]


def read_container_file_command(path: str) -> list[str]:
    """The command that writes the regular file at ``path`` to stdout after a line with its size,
    as Poseidon's ``ls`` line gives it; a path that is not a readable regular file exits
    66 (or 68 for a directory) before that line."""
    quoted = shlex.quote(path)
    script = (
        f"p={quoted}; "
        f"if [ -d \"$p\" ]; then echo 'is a directory' >&2; exit {_DIRECTORY_EXIT_CODE}; fi; "
        'if [ ! -f "$p" ] || [ ! -r "$p" ]; then '
        f"echo 'no such regular file, or not readable' >&2; exit {_MISSING_EXIT_CODE}; fi; "
        f's=$(stat -L -c %s -- "$p") || exit {_MISSING_EXIT_CODE}; echo "$s"; '
        # nonblock: a file swapped for a FIFO after the test fails at once instead of waiting.
        'exec dd if="$p" iflag=nonblock bs=65536 status=none'
    )
    return ["/bin/sh", "-c", script]


def parse_ls_listing(output: bytes) -> list[dict[str, Any]]:
    """The FileHeaders of a ``list_container_command``'s output, line by line as Poseidon's
    ls2json writes them: a line ``DIR:`` names the directory of the entries that follow, a line
    that is not an entry (``total 12``) is skipped."""
    headers = []
    latest_path = ""
    for line in output.decode("utf-8", "replace").split("\n"):
        if not line:
            continue
        if directory := _PATH_LINE.fullmatch(line):
            latest_path = directory[1].removesuffix("/") + "/"
            continue
        entry = _HEADER_LINE.search(line)
        if entry is None:
            continue
        kind, permissions, acl, owner, group, size, mtime, name = entry.groups()
        name = latest_path + name
        header: dict[str, Any] = {"name": name, "entryType": kind}
        if kind == "l":
            parts = name.split(_LINK_ARROW)
            if len(parts) == 2:  # one part: the link's target could not be read
                header["name"], header["linkTarget"] = parts
        header.update(
            size=int(size),
            modificationTime=int(mtime),
            permissions=permissions + ("+" if acl else ""),
            owner=owner,
            group=group,
        )
        headers.append(header)
    return headers
