"""The daemon's file commands, as the command model knows them: their whole text, word for word.

The model runs a copy, delete, listing or download only when its script is exactly one the model was
validated against (``tests/simulator/test_command_model.py`` runs each through /bin/sh in a real
workspace and through the model, and the two must agree): the fixed text below, with the paths as
the daemon quotes them in their places. A script that differs anywhere, its checks of the workspace's
boundary included, is not a file command the model knows, as a shell does not know what a changed
script would do until it runs it.
"""

from __future__ import annotations

import re
import shlex
from typing import Final

from attrs import frozen

__all__ = ["Listing", "Reading", "Update", "parse_file_script"]

# A path or name as ``shlex.quote`` writes it: bare, or in single quotes with each quote as '"'"'.
_WORD: Final = r"""(?:[\w@%+=:,./-]+|'[^']*'(?:"'"'[^']*')*)"""
_WORDS: Final = rf"(?: {_WORD})*"

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
    "exit 67; }; return 2; }; "
    "done; }; "
)


def _entered(group: str) -> str:
    return (
        rf"enter follow(?P<{group}>{_WORDS}); case \$\? in 0\) ;; "
        rf"2\) echo {_WORD} >&2; exit 67;; "
        r"\*\) echo 'no such file or directory' >&2; exit 66;; esac"
    )


_READ: Final = re.compile(
    re.escape(_PRELUDE)
    + _entered("parents")
    + rf"; f=(?P<name>{_WORD}); "
    + re.escape(
        'if [ -L "$f" ]; then t=$(readlink -f -- "$f" && echo .) || exit 66; t=${t%.}; t=${t%?}; '
        'case $t in "$W"/*) ;; *) echo '
    )
    + _WORD
    + re.escape(
        " >&2; exit 67;; esac; "
        'cd -P -- "${t%/*}/" 2>/dev/null && inside || exit 66; f=./${t##*/}; fi; '
        'if [ -f "$f" ] && [ -r "$f" ]; then stat -c %s -- "$f" || exit 66; '
        'dd if="$f" iflag=nofollow,nonblock bs=65536 status=none; '
        "elif [ -d \"$f\" ]; then echo 'is a directory' >&2; exit 68; "
        "else echo 'no such file or not readable' >&2; exit 66; fi"
    ),
)

_FIND_FORMAT: Final = re.escape(r"'%y\0%s\0%T@\0%M\0%u\0%g\0%p\0%l\0'")
_LIST: Final = re.compile(
    re.escape(_PRELUDE)
    + _entered("parents")
    + rf"; if \[ -L (?P<name>{_WORD}) \] \|\| "
    + r"\{ \[ -e (?P=name) \] && \[ ! -d (?P=name) \]; \}; "
    + rf"then printf 'e\\0'; find \./(?P=name) -maxdepth 0 -printf {_FIND_FORMAT}; else "
    + _entered("parts")
    + rf"; printf 'd\\0'; find \. -mindepth 1 (?P<flat>-maxdepth 1 )?-printf {_FIND_FORMAT}; fi",
)

_DELETE: Final = re.compile(
    rf"if enter follow(?P<parents>{_WORDS}); then rm -rf -- (?P<name>{_WORD}) \|\| exit 72; fi",
)
_CLEAR: Final = 'cd -P -- "$W" && find . -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + || exit 72'
_COPY_START: Final = (
    'S=$(mktemp -d "$W/.supervisor-copy-XXXXXXXX") || exit 71; ( '
    'cd -P -- "$S" && [ "$(pwd -P)" = "$S" ] && [ "$(stat -c %u:%a .)" = "$(id -u):700" ] || exit 71; '
    "exec 4<. || exit 71; "
    "tar --no-same-owner -x -f - || exit 72"
)
_COPY_END: Final = ' ); r=$?; rm -rf -- "$S"; [ $r -eq 0 ] || exit $r'
_MAKE_DIRECTORY: Final = re.compile(rf"\{{ enter make{_WORDS} && chmod 1777 \.; \}} \|\| exit 71")
_MOVE_FILE: Final = re.compile(
    rf"\{{ enter make{_WORDS} \|\| exit 71; \}}; "
    rf"if \[ -d (?P<name>{_WORD}) \] && \[ ! -L (?P=name) \]; "
    rf"then rmdir -- (?P=name) 2>/dev/null \|\| \{{ echo {_WORD} >&2; exit 73; \}}; fi; "
    rf"mv -f -T -- /dev/fd/4/{_WORD} (?P=name) \|\| exit 72",
)


@frozen
class Reading:
    """A download of ``path`` (relative to the workspace)."""

    path: str


@frozen
class Listing:
    """A listing of ``path``, recursive or not."""

    path: str
    recursive: bool


@frozen
class Update:
    """A PATCH: the paths deleted in order ("." clears the workspace), then a tar on stdin, or none."""

    deletions: tuple[str, ...]
    copies: bool


def _path(words: str, *names: str) -> str:
    parts = [*shlex.split(words), *(shlex.split(name)[0] for name in names)]
    return "/".join(part for part in parts if part != ".") or "."


def _moves_end(body: str, at: int) -> int | None:
    """Where the copy's moves, from ``at``, end in ``body`` (None: not the validated moves)."""
    while body.startswith("; ", at):
        move = _MAKE_DIRECTORY.match(body, at + 2) or _MOVE_FILE.match(body, at + 2)
        if move is None:
            return None
        at = move.end()
    return at


def _update(body: str) -> Update | None:
    if body == "true":
        return Update((), copies=False)
    deletions: list[str] = []
    at = 0
    while True:
        if body.startswith(_CLEAR, at):
            deletions.append(".")
            at += len(_CLEAR)
        elif deleted := _DELETE.match(body, at):
            deletions.append(_path(deleted["parents"], deleted["name"]))
            at = deleted.end()
        elif body.startswith(_COPY_START, at):
            end = _moves_end(body, at + len(_COPY_START))
            if end is None or body[end:] != _COPY_END:
                return None
            return Update(tuple(deletions), copies=True)
        else:
            return None
        if at == len(body):
            return Update(tuple(deletions), copies=False)
        if not body.startswith("; ", at):
            return None
        at += 2


def parse_file_script(script: str) -> Reading | Listing | Update | None:
    """What the daemon's file command ``script`` asks, or None if it is not one the model knows."""
    if read := _READ.fullmatch(script):
        name = shlex.split(read["name"])[0].removeprefix("./")
        return Reading(_path(read["parents"], shlex.quote(name)))
    if listed := _LIST.fullmatch(script):
        return Listing(_path(listed["parents"], listed["name"]), recursive=listed["flat"] is None)
    if script.startswith(_PRELUDE):
        return _update(script[len(_PRELUDE) :])
    return None
