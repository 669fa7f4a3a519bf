"""The process's file descriptors: the soft limit raised to the hard one at start (as Go's runtime
does), and a cheap count of those open, so that a server can keep a reserve for the daemon's own
connections (to Nomad above all) instead of meeting EMFILE.

Listing ``/proc/self/fd`` costs tens of microseconds per hundred descriptors: too much per accept
at thousands of connections. ``DescriptorCount`` lists it at most every ``remeasure`` seconds and
between two listings adds what the server itself opened and closed since.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from typing import Final, final

import trio
from loguru import logger

__all__ = ["DescriptorCount", "open_descriptors", "raise_open_file_limit", "soft_open_file_limit"]

_FD_FOLDER: Final = "/proc/self/fd"
# Where the hard limit is "unlimited", the soft one is raised this far (Linux's default nr_open).
_UNLIMITED_CAP: Final = 1 << 20


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one (as Go does at start); (soft before, soft
    after); logged with both if raised (at debug level if it already was). A limit that cannot be
    raised is logged and kept."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _UNLIMITED_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            logger.warning("the open file limit stays at {} (hard {}): {}", soft, hard, exc)
            return soft, soft
        logger.info("open file limit raised from {} to {} (the hard limit)", soft, target)
        return soft, target
    logger.debug("open file limit {} (hard {})", soft, hard)
    return soft, soft


def soft_open_file_limit() -> int:
    """The soft RLIMIT_NOFILE now (a very large number if unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 2**62 if soft == resource.RLIM_INFINITY else soft


def open_descriptors() -> int:
    """The descriptors this process has open now (0 where ``/proc`` is not there to say)."""
    try:
        return len(os.listdir(_FD_FOLDER))
    except OSError:
        return 0


@final
class DescriptorCount:
    """An estimate of the process's open descriptors: a listing at most every ``remeasure``
    seconds, plus the connections a server opened since, minus those it closed."""

    def __init__(
        self,
        *,
        remeasure: float = 2.0,
        measure: Callable[[], int] = open_descriptors,
        limit: Callable[[], int] = soft_open_file_limit,
    ) -> None:
        self._remeasure = remeasure
        self._measure = measure
        self._limit = limit
        self._measured = -float("inf")
        self._base = 0
        self._since = 0
        self.soft_limit = 0

    def opened(self) -> None:
        """The server opened a descriptor (accepted a connection)."""
        self._since += 1

    def closed(self) -> None:
        """The server closed one."""
        self._since -= 1

    def estimate(self) -> int:
        """The open descriptors as of now, listed again if the last listing is old."""
        now = trio.current_time()
        if now - self._measured >= self._remeasure:
            self._base, self._since, self._measured = self._measure(), 0, now
            self.soft_limit = self._limit()
        return self._base + self._since

    def left(self) -> int:
        """How many more descriptors may be opened before the soft limit."""
        estimate = self.estimate()
        return self.soft_limit - estimate
