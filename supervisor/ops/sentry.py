"""Errors to Sentry, when ``SENTRY_DSN`` is set and the ``sentry`` extra is installed
(``pip install '.[sentry]'``), through sentry-sdk's loguru integration.

Every line at ERROR becomes an event, grouped as Sentry groups it. A WARNING becomes one only when
it names its cause (``logger.bind(cause=...)``): the event stream lost (by the error that ended it),
an exec Nomad refused, a runner job the factory could not write. Those are grouped by that cause,
whatever the message's details (runner IDs, addresses), so that one outage is one issue. INFO lines
are breadcrumbs. Tokens are masked in events as in the log (``logs.redact``).

With ``SENTRY_TRACES_SAMPLE_RATE`` above 0 the API's requests are traced too (``tracing.py``);
``SENTRY_RELEASE`` names the release (else ``nomad-runner-supervisor@<version>``). The variables are
read once, by ``sentry_options``, which ``supervisor run`` calls before anything starts (a wrong
value is a usage error) and ``supervisor check`` shows (``check.sentry_result``). sentry-sdk's Starlette
integration, which it would enable by itself, stays off: it would attach request headers and bodies
(the token, the runner's files) to events; ``tracing.py`` says more.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final, final

from attrs import frozen
from loguru import logger

from .. import __version__
from ..base.errors import ConfigError
from .logs import redact

__all__ = ["CAUSE", "RATE", "SentryOptions", "init_sentry", "sentry_options"]

# The loguru ``extra`` key that names a warning's cause.
CAUSE: Final = "cause"


RATE: Final = "SENTRY_TRACES_SAMPLE_RATE"


@final
@frozen
class SentryOptions:
    """What the ``SENTRY_*`` variables ask for; an empty ``dsn`` reports nothing."""

    dsn: str
    environment: str | None
    release: str
    # 0 traces nothing; 1 every request that carries no sample decision of its caller's.
    traces_sample_rate: float


def sentry_options(environ: Mapping[str, str]) -> SentryOptions:
    """The ``SENTRY_*`` variables read; ConfigError, one line, for a rate that is not a number in 0..1."""
    text = environ.get(RATE, "").strip()
    try:
        rate = float(text) if text else 0.0
    except ValueError:
        raise ConfigError(f"{RATE}: {text!r} is not a number (a rate in 0..1)") from None
    if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
        raise ConfigError(f"{RATE}: {text!r} is outside 0..1")
    return SentryOptions(
        dsn=environ.get("SENTRY_DSN", "").strip(),
        environment=environ.get("SENTRY_ENVIRONMENT") or None,
        release=environ.get("SENTRY_RELEASE", "").strip() or f"nomad-runner-supervisor@{__version__}",
        traces_sample_rate=rate,
    )


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


def _masked_transaction(secrets: list[str]) -> Any:
    def before_send_transaction(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
        return _masked(event, secrets) if secrets else event

    return before_send_transaction


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
    is configured (that removes loguru's handlers, the integration's included), and before the API's
    app is made (its routes are traced only if tracing is on by then). ConfigError for a wrong
    ``SENTRY_*`` value."""
    options = sentry_options(environ)
    if not options.dsn:
        return False
    try:
        import sentry_sdk
        from sentry_sdk.integrations.logging import LoggingIntegration
        from sentry_sdk.integrations.loguru import LoggingLevels, LoguruIntegration
        from sentry_sdk.integrations.starlette import StarletteIntegration
        from sentry_sdk.integrations.stdlib import StdlibIntegration
    except ImportError:
        logger.warning("SENTRY_DSN is set, but sentry-sdk is not installed: pip install '.[sentry]'")
        return False
    tracing = options.traces_sample_rate > 0
    secrets_by_length = sorted({s for s in secrets if s}, key=len, reverse=True)
    sentry_sdk.init(
        dsn=options.dsn,
        release=options.release,
        environment=options.environment,
        traces_sample_rate=options.traces_sample_rate if tracing else None,
        # The request's body is the runner's files, or a command and its environment variables.
        max_request_body_size="never",
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
        # Starlette's would attach requests' headers and bodies (tracing.py); the standard library's
        # patches subprocess for the whole process, giving every child SUBPROCESS_SENTRY_TRACE and
        # SUBPROCESS_BAGGAGE, so the simulated cluster's containers, where students' code runs.
        disabled_integrations=[StarletteIntegration, StdlibIntegration],
        before_send=_grouped(secrets_by_length),
        before_send_transaction=_masked_transaction(secrets_by_length),
        transport=transport,
    )
    if tracing:
        rate = options.traces_sample_rate
        logger.info("reporting errors, and traces of {} of the API's requests, to Sentry", rate)
    else:
        logger.info("reporting errors to Sentry")
    return True
