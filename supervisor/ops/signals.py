"""What the daemon does on a signal: SIGTERM or SIGINT begins a graceful stop (a second one stops at
once), and SIGHUP reloads what may change at run time (``reload.Reloader``), never stopping it."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Protocol

import trio
from loguru import logger

from ..core.config import Settings

__all__ = ["Stoppable", "run_until_signalled"]


class Stoppable(Protocol):
    """The daemon, as the signals see it."""

    settings: Settings

    def stop(self) -> None:
        """Begin the graceful stop; a second call stops at once."""

    async def run(self) -> None:
        """Run until stopped."""


async def run_until_signalled(daemon: Stoppable, reload: Callable[[], object]) -> None:
    """Run ``daemon`` until it stops, stopping it on SIGTERM or SIGINT and calling ``reload`` on
    SIGHUP."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:

        async def on_signals() -> None:
            graceful = True
            async for received in signals:
                name = signal.Signals(received).name
                if received == signal.SIGHUP:
                    logger.info("received SIGHUP, reloading the configuration")
                    reload()
                    continue
                if graceful:
                    budget = daemon.settings.server.graceful_timeout
                    logger.info(
                        "received {}, stopping gracefully within {:.0f}s (again: at once)", name, budget
                    )
                else:
                    logger.warning("received {} again, stopping at once", name)
                daemon.stop()
                graceful = False

        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_signals)
            await daemon.run()  # until a signal stops it, or it stops itself (see Daemon.failure)
            nursery.cancel_scope.cancel("the daemon stopped")
