"""A command on a real pseudo-terminal, as an exec with ``tty=true`` runs it.

The command is the leader of a session of its own, with the terminal's slave side as its controlling
terminal and its stdin, stdout and stderr (``setsid --ctty``); the exec reads and writes the master
side, raw, through trio. What the command writes to stdout or stderr comes out of the master as one
stream, as the terminal makes it (``\\n`` written as ``\\r\\n``), and what is written to the master
is the terminal's input (echoed, line by line). Its window size is set from Nomad's ``tty_size``
frames; until the first one it is 0x0, as Docker leaves an exec's terminal that is given no size.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import struct
import termios
from collections.abc import Mapping
from pathlib import Path

import trio

__all__ = ["TerminalProcess", "open_terminal_process"]


class _Master(trio.abc.Stream):
    """The terminal's master side: the command's output, and its input."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._stream = trio.lowlevel.FdStream(fd)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The terminal's output; b"" once no process has the terminal open any more (EIO)."""
        try:
            return bytes(await self._stream.receive_some(max_bytes))
        except trio.BrokenResourceError as error:
            if isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.EIO:
                return b""
            raise

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Type ``data`` at the terminal."""
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()


class TerminalProcess:
    """A command on a terminal: ``stdout`` is the terminal's output, ``stdin`` its input."""

    stderr = None

    def __init__(self, process: trio.Process, master: _Master) -> None:
        self._process = process
        self._master = master
        self.stdin: trio.abc.SendStream = master
        self.stdout: trio.abc.ReceiveStream = master

    @property
    def returncode(self) -> int | None:
        """The exit status, None while it runs."""
        return self._process.returncode

    async def wait(self) -> int:
        """The exit status once it exits; negative: killed by that signal."""
        return await self._process.wait()

    def kill(self) -> None:
        """Kill the command and everything in its session's process group."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)

    def resize(self, *, height: int, width: int) -> None:
        """The terminal's new window size (TIOCSWINSZ; the command gets SIGWINCH)."""
        with contextlib.suppress(OSError):
            size = struct.pack("HHHH", max(0, height) & 0xFFFF, max(0, width) & 0xFFFF, 0, 0)
            fcntl.ioctl(self._master.fd, termios.TIOCSWINSZ, size)

    async def reap(self) -> None:
        """Close the terminal and wait for the command."""
        await self._master.aclose()
        await self._process.wait()


async def open_terminal_process(command: list[str], *, cwd: Path, env: Mapping[str, str]) -> TerminalProcess:
    """Start ``command`` on a new pseudo-terminal, as its session's leader; OSError when it cannot."""
    master, slave = os.openpty()
    try:
        # setsid(1) makes a process that is no group leader (as a new child is not) a session
        # leader without forking, and --ctty makes its stdin, the terminal, the session's.
        process = await trio.lowlevel.open_process(
            ["setsid", "--ctty", *command], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return TerminalProcess(process, _Master(master))
