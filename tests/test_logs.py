"""The one log stream: text or flat JSON lines, the standard library's lines in it, no secret in any,
the journal's priorities under systemd, and the startup line with the configuration."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import attrs
import pytest
from loguru import logger

from supervisor import __version__
from supervisor.base.errors import ConfigError
from supervisor.core.config import SECTIONS, LogSettings, load_settings
from supervisor.ops.logs import configure_logging, redact, writes_to_journal
from supervisor.ops.reload import startup_line

SECRET = "s3cret-token"
NOMAD_SECRET = 'nomad"token'
RUNNER = "10-9b0f3e94-32a7-4e12-bcf9-ec42f2c85342"
EXECUTION = "e85f7ae8-afa8-402e-8cfb-a78506326e58"


@pytest.fixture
def sink() -> Iterator[io.StringIO]:
    out = io.StringIO()
    yield out
    logger.remove()
    logger.add(sys.stderr)
    logging.basicConfig(handlers=[], force=True)


def json_lines(sink: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in sink.getvalue().splitlines()]


def test_json_lines_carry_our_lines_and_the_libraries(sink: io.StringIO) -> None:
    configure_logging(LogSettings(level="INFO", format="json"), [], sink)
    logger.info("environment {} created", 10)
    logger.debug("a bulk line")
    logging.getLogger("trio_websocket").warning("a library said so")
    assert [(r["level"], r["logger"], r["message"]) for r in json_lines(sink)] == [
        ("INFO", "tests.test_logs", "environment 10 created"),
        ("WARNING", "trio_websocket", "a library said so"),
    ]


def test_a_json_line_is_flat_and_small(sink: io.StringIO) -> None:
    configure_logging(LogSettings(format="json"), [], sink)
    logger.info("execution ended", execution=EXECUTION, runner=RUNNER, seconds=0.008, outcome="exit 3")
    logger.info("runner released", runner=RUNNER)
    logger.info('{} "{method} {} {protocol}" {status} {bytes} B {duration_ms:.1f} ms', "127.0.0.1:35680",
                f"/api/v1/runners/{RUNNER}/files", method="PATCH", protocol="HTTP/1.1", status=204, bytes=0,
                duration_ms=6.4)  # fmt: skip
    lines = sink.getvalue().splitlines()
    ended, released, access = json_lines(sink)
    assert list(ended) == ["time", "level", "logger", "message", "execution", "runner", "seconds", "outcome"]
    assert ended["outcome"] == "exit 3"
    assert ended["seconds"] == 0.008
    assert released["runner"] == RUNNER
    assert access["status"] == 204
    assert access["duration_ms"] == 6.4
    assert access["protocol"] == "HTTP/1.1"
    time = datetime.fromisoformat(str(ended["time"]))
    assert time.tzinfo is not None, "RFC 3339 with its offset"
    assert str(ended["time"]).endswith("Z")
    for line in lines:
        assert len(line.encode()) < 300, line
        assert "record" not in line
        assert '"extra"' not in line
        assert os.sep + "work" + os.sep not in line


def test_a_json_line_without_fields_has_only_the_four(sink: io.StringIO) -> None:
    configure_logging(LogSettings(format="json"), [], sink)
    logger.info("event stream up from index {}", 2)
    (line,) = json_lines(sink)
    assert set(line) == {"time", "level", "logger", "message"}


def test_a_traceback_names_files_without_absolute_paths(sink: io.StringIO) -> None:
    configure_logging(LogSettings(format="json"), [], sink)
    try:
        load_settings(None, {"SUPERVISOR_SERVER_PORT": "high"})
    except ConfigError:
        logger.exception("loading failed")
    (line,) = json_lines(sink)
    exception = str(line["exception"])
    assert 'File "supervisor/core/config.py"' in exception
    assert 'File "/' not in exception
    assert "ConfigError: SUPERVISOR_SERVER_PORT: 'high' is not a valid int" in exception


def test_text_lines_have_one_format_for_all(sink: io.StringIO) -> None:
    configure_logging(LogSettings(level="DEBUG"), [], sink)
    logger.debug("ours")
    logging.getLogger("httpx").warning("theirs")
    logger.info("runner released", runner=RUNNER)
    logger.info("execution ended", outcome="exit 3", braces="{x} <b>")
    first, second, third, fourth = sink.getvalue().splitlines()
    assert " | DEBUG    | " in first
    assert first.endswith("ours")
    assert " | WARNING  | " in second
    assert second.endswith("theirs")
    assert third.endswith(f"runner released | runner={RUNNER}")
    assert fourth.endswith('execution ended | outcome="exit 3" braces="{x} <b>"')
    time = " ".join(first.split(" ")[:2])
    assert datetime.fromisoformat(time).tzinfo is not None, "the time carries its offset"


@pytest.mark.parametrize("form", ["text", "json"])
def test_no_secret_reaches_a_line_from_anywhere(sink: io.StringIO, form: str) -> None:
    configure_logging(LogSettings(level="DEBUG", format=form), [SECRET, NOMAD_SECRET, ""], sink)
    logger.info("GET /v1/jobs?token={} X-Nomad-Token: {}", SECRET, NOMAD_SECRET)
    try:
        raise RuntimeError(f"refused with Poseidon-Token {SECRET}")
    except RuntimeError:
        logger.exception("a request failed")
    logging.getLogger("httpx").warning('"GET /api/v1/version?t=%s HTTP/1.1" 200', SECRET)
    logger.info("a field", token=SECRET)
    written = sink.getvalue()
    assert "RuntimeError" in written, "the traceback was written"
    assert "/api/v1/version" in written
    assert SECRET not in written
    assert NOMAD_SECRET not in written
    assert json.dumps(NOMAD_SECRET)[1:-1] not in written
    assert written.count("***") >= 5


def test_redact_replaces_the_json_escaped_form_too() -> None:
    assert redact(json.dumps({"t": NOMAD_SECRET}), [NOMAD_SECRET]) == '{"t": "***"}'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("connection on the runner", "connection *** the runner"),
        ("/api/v1/runners/on/files", "/api/v1/runners/***/files"),
        ("token=on&x=1", "token=***&x=1"),
        ("one, ongoing, on-call, on_time, won", "one, ongoing, on-call, on_time, won"),
        ('{"t":"on"}', '{"t":"***"}'),
    ],
)
def test_a_secret_is_masked_only_as_a_whole_token(text: str, expected: str) -> None:
    assert redact(text, ["on"]) == expected


def test_journal_lines_start_with_their_priority(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    with path.open("w") as out:
        status = os.fstat(out.fileno())
        environ = {"JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}"}
        assert writes_to_journal(out, environ)
        assert not writes_to_journal(out, {"JOURNAL_STREAM": "1:2"}), "another stream is not the journal"
        assert not writes_to_journal(io.StringIO(), environ)
        try:
            configure_logging(LogSettings(level="DEBUG"), [], out, environ=environ)
            logger.debug("debug")
            logger.info("info")
            logger.warning("warning")
            logger.error("error")
            try:
                raise RuntimeError("boom")
            except RuntimeError:
                logger.exception("failed")
        finally:
            logger.remove()
            logging.basicConfig(handlers=[], force=True)
    lines = path.read_text().splitlines()
    assert [line[:3] for line in lines[:4]] == ["<7>", "<6>", "<4>", "<3>"]
    assert lines[4].startswith("<3>")
    assert lines[4].endswith("failed")
    assert any("RuntimeError: boom" in line for line in lines[5:]), "the traceback was written"
    assert all(line.startswith("<3>") for line in lines[5:]), "each line of a traceback keeps its priority"


def test_a_stream_applies_new_settings_and_leaves_other_handlers(sink: io.StringIO) -> None:
    stream = configure_logging(LogSettings(level="INFO"), [SECRET], sink)
    other: list[str] = []
    handler = logger.add(lambda message: other.append(message.record["message"]), level="DEBUG")
    try:
        logger.debug("hidden")
        stream.apply(LogSettings(level="DEBUG", format="json"))
        logger.debug("shown {}", SECRET)
    finally:
        logger.remove(handler)
    (line,) = json_lines(sink)
    assert line["message"] == "shown ***", "the secrets stay masked"
    assert other == ["hidden", f"shown {SECRET}"], "another handler (Sentry's) stays"


def test_the_startup_line_gives_every_key_its_value_and_source(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[server]\nport = 7300\n")
    nomad_token = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    environ = {
        "SUPERVISOR_SERVER_TOKEN": SECRET,
        "NOMAD_ADDR": "http://10.0.0.5:4646",
        "NOMAD_TOKEN": nomad_token,
    }
    settings = load_settings(config, environ)
    line = startup_line(settings, str(config), environ, settings.nomad_settings(environ))
    assert line.startswith(
        f"supervisor {__version__} starting with {config}; from the file: server.port=7300; "
    )
    assert "; from the environment: server.token=*** (SUPERVISOR_SERVER_TOKEN), " in line
    assert 'nomad.address=["http://10.0.0.5:4646"] (NOMAD_ADDR)' in line
    assert "nomad.token=*** (NOMAD_TOKEN)" in line
    assert '; defaults: server.address="127.0.0.1", ' in line
    assert line.endswith("; environments: none")
    assert SECRET not in line
    assert nomad_token not in line
    for section, cls in SECTIONS.items():
        for attribute in attrs.fields(cls):
            assert f"{section}.{attribute.name}=" in line
