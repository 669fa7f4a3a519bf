"""Errors to Sentry, when ``SENTRY_DSN`` is set and the ``sentry`` extra is installed
(``pip install '.[sentry]'``), through sentry-sdk's loguru integration.

Every line at ERROR becomes an event, grouped as Sentry groups it. A WARNING becomes one only when
it names its cause (``logger.bind(cause=...)``): the event stream lost (by the error that ended it),
an exec Nomad refused, a runner job the factory could not write. Those are grouped by that cause,
whatever the message's details (runner IDs, addresses), so that one outage is one issue. INFO lines
are breadcrumbs. Tokens are masked in events as in the log (``logs.redact``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from loguru import logger

from .. import __version__
from .logs import redact

__all__ = ["CAUSE", "init_sentry"]

# The loguru ``extra`` key that names a warning's cause.
CAUSE: Final = "cause"


def _grouped(secrets: list[str]) -> Any:
    def before_send(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any] | None:
        extra = (event.get("extra") or {}).get("extra") or {}
        cause = extra.get(CAUSE) if isinstance(extra, dict) else None
        if cause:
            event["fingerprint"] = ["supervisor", str(cause)]
            event.setdefault("tags", {})[CAUSE] = str(cause)
        elif event.get("level") not in ("error", "fatal"):
            return None
        return _masked(event, secrets) if secrets else event

    return before_send


def _masked(value: Any, secrets: list[str]) -> Any:
    """``value`` with every secret masked in every string it holds (messages, breadcrumbs, frames)."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: _masked(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v, secrets) for v in value]
    return value


def init_sentry(environ: Mapping[str, str], secrets: Iterable[str] = (), *, transport: Any = None) -> bool:
    """Start reporting to Sentry if ``SENTRY_DSN`` is set; True if it does. Call it after the log
    is configured (that removes loguru's handlers, the integration's included)."""
    dsn = environ.get("SENTRY_DSN", "")
    if not dsn:
        return False
    try:
        import sentry_sdk
        from sentry_sdk.integrations.logging import LoggingIntegration
        from sentry_sdk.integrations.loguru import LoggingLevels, LoguruIntegration
    except ImportError:
        logger.warning("SENTRY_DSN is set, but sentry-sdk is not installed: pip install '.[sentry]'")
        return False
    sentry_sdk.init(
        dsn=dsn,
        release=f"nomad-runner-supervisor@{__version__}",
        environment=environ.get("SENTRY_ENVIRONMENT") or None,
        integrations=[
            LoguruIntegration(
                level=LoggingLevels.INFO.value,
                event_level=LoggingLevels.WARNING.value,
                breadcrumb_format="{message}",
                event_format="{message}",
            ),
            # The standard library's lines reach loguru first (logs.py): report them once, from there.
            LoggingIntegration(level=None, event_level=None),
        ],
        before_send=_grouped(sorted({s for s in secrets if s}, key=len, reverse=True)),
        transport=transport,
    )
    logger.info("reporting errors to Sentry")
    return True
