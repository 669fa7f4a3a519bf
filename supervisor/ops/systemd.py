"""systemd's notify protocol (``Type=notify``), without a dependency: one datagram per message to
the unix socket named by ``$NOTIFY_SOCKET`` (``@`` for the abstract namespace), as sd_notify(3)
sends them. Without that variable every call does nothing.

The daemon says ``READY=1`` once its first listing is reconciled and its API serves, ``STATUS=``
lines with the stream's state and the pools, ``WATCHDOG=1`` while its event loop runs and its
informer makes progress (``$WATCHDOG_USEC``, from ``WatchdogSec=``), and ``STOPPING=1``
when it begins to stop.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from loguru import logger

__all__ = ["SystemdNotifier"]


class SystemdNotifier:
    """Messages to systemd, when it runs the daemon as a ``Type=notify`` service."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        path = environ.get("NOTIFY_SOCKET", "")
        self._address = "\0" + path[1:] if path.startswith("@") else path
        self._socket: socket.socket | None = None
        self._failing = False
        usec = environ.get("WATCHDOG_USEC", "")
        for_us = environ.get("WATCHDOG_PID", str(os.getpid())) == str(os.getpid())
        # systemd restarts the service if no ping comes within WATCHDOG_USEC: ping twice as often.
        self.watchdog_interval = int(usec) / 2e6 if usec.isdigit() and int(usec) > 0 and for_us else None

    @property
    def enabled(self) -> bool:
        """Whether systemd listens (``$NOTIFY_SOCKET`` is set)."""
        return bool(self._address)

    def notify(self, *lines: str) -> None:
        """Send ``lines`` (``READY=1``, ``STATUS=...``) as one message; a failure is logged, never
        raised: systemd's absence must not stop the daemon."""
        if not self._address:
            return
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.setblocking(False)
            self._socket.sendto("\n".join(lines).encode(), self._address)
        except OSError as exc:
            if not self._failing:
                where = self._address.replace("\0", "@")
                logger.warning("could not notify systemd at {}: {} (said once)", where, exc)
            self._failing = True
        else:
            self._failing = False

    def close(self) -> None:
        """Close the socket (a later message opens it again)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
