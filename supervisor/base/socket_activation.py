"""Systemd's socket activation (``sd_listen_fds(3)``): a listening socket that systemd bound and
passed, served instead of one the daemon binds, so that connections made while the daemon restarts
wait in the socket's backlog instead of being refused.

The protocol: ``LISTEN_PID`` names the process the sockets are for, ``LISTEN_FDS`` says how many
there are, from file descriptor 3 on, and ``LISTEN_FDNAMES`` may name them (colon-separated; the
socket unit's name by default). The variables are removed once read, so that no child process takes
the sockets as its own, and the descriptors are marked close-on-exec.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Final, final

import trio
from attrs import frozen

from .errors import ConfigError

__all__ = [
    "FIRST_FD",
    "KeptListener",
    "PassedSocket",
    "passed_listener",
    "passed_sockets",
    "take_passed_listener",
]

FIRST_FD: Final = 3
_VARIABLES: Final = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


@final
@frozen
class PassedSocket:
    """One descriptor systemd passed, and its name."""

    fd: int
    name: str


def passed_sockets(environ: Mapping[str, str], pid: int) -> list[PassedSocket]:
    """The sockets passed to process ``pid``: none unless ``LISTEN_PID`` is ``pid`` and
    ``LISTEN_FDS`` a count of one or more. Names missing or of another count are "unknown", as
    ``sd_listen_fds_with_names`` has them."""
    if environ.get("LISTEN_PID", "").strip() != str(pid):
        return []
    text = environ.get("LISTEN_FDS", "").strip()
    if not text.isdigit():
        if text:
            raise ConfigError(f"LISTEN_FDS: {text!r} is not a count of file descriptors")
        return []
    count = int(text)
    names = environ.get("LISTEN_FDNAMES", "").split(":")
    if len(names) != count:
        names = ["unknown"] * count
    return [PassedSocket(FIRST_FD + i, name or "unknown") for i, name in enumerate(names)]


def take_passed_listener(
    environ: MutableMapping[str, str] | None = None,
) -> tuple[trio.SocketListener, str] | None:
    """The listening socket systemd passed to this process, and its name; None when it passed
    none. The variables are removed from ``environ`` (the process's by default) either way.
    ConfigError when it passed more than one, or when the descriptor is not a listening TCP socket."""
    environ = os.environ if environ is None else environ
    passed = passed_sockets(environ, os.getpid())
    for name in _VARIABLES:
        environ.pop(name, None)
    if not passed:
        return None
    if len(passed) > 1:
        names = ", ".join(f"{each.fd} ({each.name})" for each in passed)
        raise ConfigError(
            f"LISTEN_FDS={len(passed)}: systemd passed {len(passed)} sockets (descriptors {names}) "
            "and the API serves one: keep one ListenStream= in the socket unit"
        )
    return passed_listener(passed[0])


def passed_listener(passed: PassedSocket) -> tuple[trio.SocketListener, str]:
    """The passed descriptor as a listener, marked close-on-exec, and its name; ConfigError when
    it is no open descriptor or not a listening TCP socket."""
    try:
        os.set_inheritable(passed.fd, False)
        sock = socket.socket(fileno=passed.fd)
    except OSError as exc:
        raise ConfigError(
            f"LISTEN_FDS: descriptor {passed.fd} ({passed.name}): {exc.strerror or exc}"
        ) from None
    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    if (
        sock.family not in (socket.AF_INET, socket.AF_INET6)
        or sock.type != socket.SOCK_STREAM
        or not listening
    ):
        sock.detach()
        raise ConfigError(
            f"LISTEN_FDS: descriptor {passed.fd} ({passed.name}) is not a listening TCP socket "
            "(ListenStream= with an address and port)"
        )
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock)), passed.name


@final
class KeptListener(trio.abc.Listener[trio.abc.Stream]):
    """A passed socket's listener for one run of the server: its close ends this run's accepts but
    keeps the socket, which systemd holds too, for the server's next run or the next process. With
    ``ready``, nothing is accepted until it has returned: meanwhile connections wait in the backlog."""

    def __init__(
        self, listener: trio.SocketListener, *, ready: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.listener = listener
        self._ready = ready
        self._closed = False

    async def accept(self) -> trio.abc.Stream:
        """The next connection; ClosedResourceError once this run has closed."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            raise trio.ClosedResourceError("the listener is closed")
        if self._ready is not None:
            await self._ready()
            self._ready = None
        return await self.listener.accept()

    async def aclose(self) -> None:
        """End this run's accepts; the socket stays open."""
        self._closed = True
        await trio.lowlevel.checkpoint()
