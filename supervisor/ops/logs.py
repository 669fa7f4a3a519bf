"""One log stream: the daemon's own lines (loguru) and the standard library's (httpx,
trio-websocket), as text or as one flat JSON object per line, with every secret the daemon holds
written as ``***``.

A JSON line is ``{"time", "level", "logger", "message"}`` and the event's fields beside them (what a
call binds or passes by keyword: ``logger.info("runner released", runner=runner_id)``), with
``exception`` when there is a traceback; the time is RFC 3339 in UTC. A text line is
``time | LEVEL | logger - message | key=value ...``, its time local with its offset. Tracebacks name
files relative to where Python found them. Under systemd, when stderr is the journal
(``$JOURNAL_STREAM``), each line starts with its syslog priority (``<3>`` for an error), so that
``journalctl -p`` filters by level.

Secrets are removed from the finished line, so a token in a message, a URL, an exception's text or
a traceback is caught alike, and only where it stands as a whole token: a short word that happens to
be inside a longer one is left alone. loguru's ``diagnose`` (which prints variables' values in
tracebacks) is off.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Iterable, Mapping
from datetime import UTC
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from loguru import logger

from ..core.config import LogSettings

if TYPE_CHECKING:
    from loguru import Message, Record

__all__ = ["LogStream", "configure_logging", "json_line", "redact", "writes_to_journal"]

TEXT_FORMAT: Final = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSSZ}</green> | <level>{level: <8}</level> | "
    "<cyan>{name}</cyan> - <level>{message}</level>"
)
# The standard library's lines (the HTTP clients') below this level are dropped.
_LIBRARY_LEVEL: Final = logging.INFO
MASK: Final = "***"
# Libraries that log every request at INFO: the daemon logs what matters of them itself.
_QUIET: Final = ("httpx", "httpcore", "trio_websocket")
# syslog's priorities, as sd-daemon(3) reads them at the start of a line.
PRIORITIES: Final = {
    "TRACE": 7,
    "DEBUG": 7,
    "INFO": 6,
    "SUCCESS": 5,
    "WARNING": 4,
    "ERROR": 3,
    "CRITICAL": 2,
}
_STANDARD_KEYS: Final = ("time", "level", "logger", "message", "exception")
_LOGFMT_BARE: Final = re.compile(r"[^\s\"=]+")


# -- secrets --------------------------------------------------------------------------------------


@lru_cache(maxsize=16)
def _secrets_pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    """Each secret as written and as JSON writes it, matched only as a whole token."""
    forms = {
        form for s in secrets for form in (s, json.dumps(s)[1:-1], json.dumps(s, ensure_ascii=False)[1:-1])
    }
    if not forms:
        return None
    alternatives = "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])(?:{alternatives})(?![\w-])")


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each whole-token occurrence of a secret, as written and as JSON writes it,
    replaced by ``***``."""
    pattern = _secrets_pattern(tuple(sorted({s for s in secrets if s})))
    return pattern.sub(MASK, text) if pattern is not None else text


# -- paths ----------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _file_prefix() -> re.Pattern[str]:
    """``File "`` and the folder Python found the file in: the package's, a library's, the
    standard library's."""
    folders = {str(Path(__file__).resolve().parents[2])}
    folders |= {p for p in sys.path if os.path.isabs(p)}
    folders |= {sysconfig.get_paths()[name] for name in ("stdlib", "purelib", "platlib")}
    alternatives = "|".join(re.escape(f.rstrip(os.sep)) for f in sorted(folders, key=len, reverse=True))
    return re.compile(rf'File "(?:{alternatives}){re.escape(os.sep)}')


def relative_paths(text: str) -> str:
    """``text`` (a traceback) with each file named from where Python found it."""
    return _file_prefix().sub('File "', text)


# -- lines ----------------------------------------------------------------------------------------


def _fields(record: Record) -> dict[str, Any]:
    return {k: v for k, v in record["extra"].items() if k not in _STANDARD_KEYS}


def json_line(record: Record) -> str:
    """The record as one flat JSON object: time, level, logger, message, the event's fields, and
    the traceback (``exception``) if there is one."""
    time = record["time"].astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    line: dict[str, Any] = {
        "time": time,
        "level": record["level"].name,
        "logger": record["name"],
        "message": record["message"],
        **_fields(record),
    }
    if record["exception"] is not None:
        kind, value, trace = record["exception"]
        line["exception"] = relative_paths("".join(traceback.format_exception(kind, value, trace)))
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"


def _logfmt(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if _LOGFMT_BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def text_line(formatted: str, record: Record) -> str:
    """The text line: loguru's, of the one static template (which loguru parses once, where a
    template with each record's fields in it was parsed for every line), with the fields after the
    message as ``key=value``, before the exception's traceback if there is one."""
    fields = " ".join(f"{k}={_logfmt(v)}" for k, v in _fields(record).items())
    if not fields:
        return formatted
    line, newline, rest = formatted.partition("\n")
    return f"{line} | {fields}{newline}{rest}"


def writes_to_journal(out: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether ``out`` is the journal's stream that systemd named in ``$JOURNAL_STREAM``
    (``device:inode``), as systemd.exec(5) says to check."""
    named = environ.get("JOURNAL_STREAM", "")
    if not named:
        return False
    try:
        status = os.fstat(out.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return named == f"{status.st_dev}:{status.st_ino}"


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


class LogStream:
    """The daemon's one sink: where its lines go, how they look and what they hide. ``apply``
    changes the level and format while the daemon runs (SIGHUP), leaving other handlers (Sentry's)
    in place."""

    def __init__(self, out: TextIO, secrets: Iterable[str], *, journal: bool) -> None:
        self._out = out
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._journal = journal
        self._handler: int | None = None
        self.settings = LogSettings()

    def _write(self, message: Message) -> None:
        record = message.record
        if self.settings.format == "json":
            text = json_line(record)
        else:
            text = relative_paths(text_line(str(message), record))
        text = redact(text, self._secrets)
        if self._journal:
            priority = PRIORITIES.get(record["level"].name, 6)
            text = "".join(f"<{priority}>{line}" for line in text.splitlines(keepends=True))
        self._out.write(text)
        self._out.flush()

    def apply(self, settings: LogSettings) -> None:
        """Write from now on at ``settings.level`` and in ``settings.format``."""
        if self._handler is not None:
            logger.remove(self._handler)
        level = settings.level.upper()
        self.settings = settings
        if settings.format == "json":
            self._handler = logger.add(self._write, level=level, format="{message}", diagnose=False)
        else:
            colour = self._out.isatty() and not self._journal
            self._handler = logger.add(
                self._write,
                level=level,
                format=TEXT_FORMAT,
                colorize=colour,
                diagnose=False,
            )


def configure_logging(
    settings: LogSettings,
    secrets: Iterable[str],
    sink: TextIO | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> LogStream:
    """Send every log line, ours and the libraries', to ``sink`` (stderr) as ``settings`` say; the
    stream returned changes them later. Every other handler is removed first (call this before
    ``init_sentry``)."""
    out = sink or sys.stderr
    logger.remove()
    stream = LogStream(
        out, secrets, journal=writes_to_journal(out, os.environ if environ is None else environ)
    )
    stream.apply(settings)
    logging.basicConfig(handlers=[_InterceptHandler()], level=_LIBRARY_LEVEL, force=True)
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    return stream
