"""The one log stream: text or JSON lines, the standard library's lines in it, and no secret in any."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from loguru import logger

from supervisor.core.config import LogSettings
from supervisor.ops.logs import configure_logging, redact

SECRET = "s3cret-token"
NOMAD_SECRET = 'nomad"token'


@pytest.fixture
def sink() -> Iterator[io.StringIO]:
    out = io.StringIO()
    yield out
    logger.remove()
    logger.add(__import__("sys").stderr)
    logging.basicConfig(handlers=[], force=True)


def test_json_lines_carry_our_lines_and_the_libraries(sink: io.StringIO) -> None:
    configure_logging(LogSettings(level="INFO", format="json"), [], sink)
    logger.info("environment {} created", 10)
    logger.debug("a bulk line")
    logging.getLogger("trio_websocket").warning("a library said so")
    records = [json.loads(line)["record"] for line in sink.getvalue().splitlines()]
    assert [(r["level"]["name"], r["message"]) for r in records] == [
        ("INFO", "environment 10 created"),
        ("WARNING", "a library said so"),
    ]


def test_text_lines_have_one_format_for_all(sink: io.StringIO) -> None:
    configure_logging(LogSettings(level="DEBUG"), [], sink)
    logger.debug("ours")
    logging.getLogger("httpx").warning("theirs")
    first, second = sink.getvalue().splitlines()
    assert " | DEBUG    | " in first
    assert first.endswith("ours")
    assert " | WARNING  | " in second
    assert second.endswith("theirs")


@pytest.mark.parametrize("form", ["text", "json"])
def test_no_secret_reaches_a_line_from_anywhere(sink: io.StringIO, form: str) -> None:
    configure_logging(LogSettings(level="DEBUG", format=form), [SECRET, NOMAD_SECRET, ""], sink)
    logger.info("GET /v1/jobs?token={} X-Nomad-Token: {}", SECRET, NOMAD_SECRET)
    try:
        raise RuntimeError(f"refused with Poseidon-Token {SECRET}")
    except RuntimeError:
        logger.exception("a request failed")
    logging.getLogger("httpx").warning('"GET /api/v1/version?t=%s HTTP/1.1" 200', SECRET)
    written = sink.getvalue()
    assert "RuntimeError" in written, "the traceback was written"
    assert "/api/v1/version" in written
    assert SECRET not in written
    assert NOMAD_SECRET not in written
    assert json.dumps(NOMAD_SECRET)[1:-1] not in written
    assert written.count("***") >= 4


def test_redact_replaces_the_json_escaped_form_too() -> None:
    assert redact(json.dumps({"t": NOMAD_SECRET}), [NOMAD_SECRET]) == '{"t": "***"}'
