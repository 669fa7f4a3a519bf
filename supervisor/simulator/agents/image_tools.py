"""The tools of CodeOcean's images that the simulated containers imitate, at the paths the images
have them.

CodeOcean's images (openHPI's ``co_execenv_*``, built on phusion's baseimage) have ``/bin/bash``,
the GNU tools and ``/sbin/setuser USER COMMAND...``; an unprivileged execution runs under
``/sbin/setuser user``. A simulated container has no root filesystem of its own: its commands are
local processes, with the host's ``/bin/bash`` and GNU tools. The tools a host does not have are
written into a tools directory of the cluster's, and every absolute path of one of them in an exec's
argv (in a script's text too) is mapped there before the command starts: a path the command builds
at run time is not.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["ImageTools"]

# phusion's setuser sets USER and HOME and switches to the user; the imitation switches only where
# the simulator may (running as root, the user known to the host). Otherwise it sets the variables
# only, and HOME stays the task's: a host has no "user" as an image has, and needs none.
_SETUSER: Final = r"""#!/bin/bash
if (( $# < 2 )); then
    echo "Usage: /sbin/setuser USERNAME COMMAND [args..]" >&2
    exit 1
fi
name=$1
shift
export USER="$name" LOGNAME="$name"
if (( EUID == 0 )) && entry=$(getent passwd -- "$name"); then
    IFS=: read -r _ _ uid gid _ home _ <<< "$entry"
    export HOME="$home"
    exec setpriv --reuid="$uid" --regid="$gid" --init-groups -- "$@"
fi
exec "$@"
"""

# The imitated tools, by their path in the image.
_TOOLS: Final = {"/sbin/setuser": _SETUSER}
# Where a path names a tool: a whole word (not part of a longer path or name).
_PATHS: Final = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(p) for p in _TOOLS) + r")(?![\w./-])")
_SAFE_DIRECTORY: Final = re.compile(r"[\w./-]+")


class ImageTools:
    """The imitated tools, written under ``directory``, and the mapping of their paths there."""

    def __init__(self, directory: Path) -> None:
        if not _SAFE_DIRECTORY.fullmatch(str(directory)):
            raise ValueError(f"the tools directory must be a path of plain characters, not {directory}")
        self.directory = directory
        self._written = False

    def write(self) -> None:
        """Write the tools (once; again after the directory was removed)."""
        if self._written and self.directory.is_dir():
            return
        for path, text in _TOOLS.items():
            tool = self.directory / path.lstrip("/")
            tool.parent.mkdir(parents=True, exist_ok=True)
            tool.write_text(text)
            tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self._written = True

    def mapped(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with every imitated tool's path mapped to its imitation."""
        self.write()
        return [_PATHS.sub(lambda found: f"{self.directory}{found[1]}", word) for word in argv]
