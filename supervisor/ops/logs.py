"""One log stream: the daemon's own lines (loguru) and the standard library's (httpx,
trio-websocket), as text or as one JSON object per line, with every secret the daemon holds written
as ``***``.

Secrets are removed from the finished line, so a token in a message, a URL, an exception's text or
a traceback is caught alike; loguru's ``diagnose`` (which prints variables' values in tracebacks) is
off.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, TextIO

from loguru import logger

from ..core.config import LogSettings

if TYPE_CHECKING:
    from loguru import Record

__all__ = ["configure_logging", "redact"]

TEXT_FORMAT: Final = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | "
    "<cyan>{name}</cyan> - <level>{message}</level>"
)
# The standard library's lines (the HTTP clients') below this level are dropped.
_LIBRARY_LEVEL: Final = logging.INFO
MASK: Final = "***"
# Libraries that log every request at INFO: the daemon logs what matters of them itself.
_QUIET: Final = ("httpx", "httpcore", "trio_websocket")


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each secret, as written and as JSON writes it, replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, MASK)
        escaped = json.dumps(secret)[1:-1]
        if escaped != secret:
            text = text.replace(escaped, MASK)
    return text


class _InterceptHandler(logging.Handler):
    """A standard-library record, logged by loguru at its level, from where it was made."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno

        def as_its_own(entry: Record) -> None:
            entry["name"] = record.name
            entry["function"] = record.funcName
            entry["line"] = record.lineno

        logger.patch(as_its_own).opt(exception=record.exc_info).log(level, record.getMessage())


def configure_logging(settings: LogSettings, secrets: Iterable[str], sink: TextIO | None = None) -> None:
    """Send every log line, ours and the libraries', to ``sink`` (stderr) as ``settings`` say."""
    out = sink or sys.stderr
    hidden = sorted({s for s in secrets if s}, key=len, reverse=True)

    def write(message: str) -> None:
        out.write(redact(str(message), hidden))
        out.flush()

    logger.remove()
    if settings.format == "json":
        logger.add(write, level=settings.level.upper(), serialize=True, backtrace=False, diagnose=False)
    else:
        colour = out.isatty()
        logger.add(write, level=settings.level.upper(), format=TEXT_FORMAT, colorize=colour, diagnose=False)
    logging.basicConfig(handlers=[_InterceptHandler()], level=_LIBRARY_LEVEL, force=True)
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
