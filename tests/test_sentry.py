"""Errors to Sentry through sentry-sdk's loguru integration, captured by a transport of sentry-sdk's
own kind (no network): what becomes an event, how events are grouped, and no token in them."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
from loguru import logger
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from supervisor.core.config import LogSettings
from supervisor.ops.logs import configure_logging
from supervisor.ops.sentry import init_sentry

SECRET = "s3cret-token"


class CapturingTransport(Transport):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            self.events.append(dict(event))


@pytest.fixture
def transport() -> Iterator[CapturingTransport]:
    captured = CapturingTransport()
    # Breadcrumbs that earlier tests in this process left in the scopes (an HTTP call's has no
    # message) are not this test's.
    sentry_sdk.get_isolation_scope().clear()
    sentry_sdk.get_current_scope().clear()
    configure_logging(LogSettings(), [SECRET], io.StringIO())
    environ = {"SENTRY_DSN": "https://public@sentry.invalid/1"}
    assert init_sentry(environ, [SECRET], transport=captured)
    yield captured
    sentry_sdk.get_client().close()
    sentry_sdk.init()
    logger.remove()
    logger.add(sys.stderr)
    logging.basicConfig(handlers=[], force=True)


def test_causes_group_warnings_and_errors_are_events(transport: CapturingTransport) -> None:
    logger.info("environment 10 created")
    logger.warning("a warning without a cause")
    cause = "event stream lost: StreamConnectionLost"
    logger.bind(cause=cause).warning("event stream lost (server 10.0.0.1 went away)")
    logger.bind(cause=cause).warning("event stream lost (server 10.0.0.2 went away)")
    logger.error("something broke with token {}", SECRET)
    sentry_sdk.flush()
    events = transport.events
    assert [e["level"] for e in events] == ["warning", "warning", "error"]
    assert events[0]["fingerprint"] == events[1]["fingerprint"] == ["supervisor", cause]
    assert events[0]["tags"]["cause"] == cause
    assert "fingerprint" not in events[2], "an error without a cause is grouped as Sentry groups it"
    assert SECRET not in repr(events)
    assert "environment 10 created" in [b["message"] for b in events[0]["breadcrumbs"]["values"]]
    assert events[0]["logentry"]["message"] == "event stream lost (server 10.0.0.1 went away)"


def test_without_a_dsn_nothing_starts() -> None:
    assert not init_sentry({})
