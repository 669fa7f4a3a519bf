"""The ``SENTRY_*`` variables: read once, a wrong sample rate refused in one line by ``supervisor
run`` (exit 2) and shown by ``supervisor check``; tracing stays off (no route wrapped, sentry-sdk
not called) unless the rate is above 0."""

from __future__ import annotations

import pytest

from supervisor import __version__
from supervisor.base.errors import ConfigError
from supervisor.cli import main
from supervisor.ops.check import sentry_result
from supervisor.ops.check_result import Status
from supervisor.ops.sentry import sentry_options

DSN = "https://public@sentry.example.org/1"


def test_defaults_trace_nothing() -> None:
    options = sentry_options({"SENTRY_DSN": DSN})
    assert options.traces_sample_rate == 0.0
    assert options.release == f"nomad-runner-supervisor@{__version__}"
    assert options.environment is None


def test_release_rate_and_environment_are_read() -> None:
    environ = {
        "SENTRY_DSN": DSN,
        "SENTRY_RELEASE": "codeocean-backend@7",
        "SENTRY_TRACES_SAMPLE_RATE": "0.25",
        "SENTRY_ENVIRONMENT": "staging",
    }
    options = sentry_options(environ)
    assert (options.release, options.traces_sample_rate, options.environment) == (
        "codeocean-backend@7",
        0.25,
        "staging",
    )
    result = sentry_result(environ)
    assert result is not None
    assert result.status is Status.OK
    for shown in ("sentry.example.org", "codeocean-backend@7", "0.25", "staging"):
        assert shown in result.detail


@pytest.mark.parametrize(
    ("rate", "why"),
    [
        ("often", "is not a number"),
        ("1.5", "outside 0..1"),
        ("-0.1", "outside 0..1"),
        ("nan", "outside 0..1"),
    ],
)
def test_a_wrong_rate_is_refused(rate: str, why: str) -> None:
    environ = {"SENTRY_DSN": DSN, "SENTRY_TRACES_SAMPLE_RATE": rate}
    with pytest.raises(ConfigError, match=why):
        sentry_options(environ)
    result = sentry_result(environ)
    assert result is not None
    assert result.status is Status.FAIL
    assert "SENTRY_TRACES_SAMPLE_RATE" in result.detail
    assert result.fix


def test_check_says_nothing_without_sentry_variables() -> None:
    assert sentry_result({"PATH": "/bin"}) is None
    off = sentry_result({"SENTRY_ENVIRONMENT": "prod"})
    assert off is not None
    assert off.status is Status.OK
    assert "SENTRY_DSN is not set" in off.detail


def test_run_refuses_a_wrong_rate_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SENTRY_TRACES_SAMPLE_RATE", "half")
    assert main(["run"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [
        "supervisor run: configuration: SENTRY_TRACES_SAMPLE_RATE: 'half' is not a number (a rate in 0..1)"
    ]
