"""Where Nomad's HTTP failures become ours, at the edges: a status no row covers, the message an
error carries, httpx's transport errors, a released response, and the words of a refused token.
Plain sync tests on ``supervisor.nomad.boundary``; nothing is sent."""

from __future__ import annotations

import httpx
import pytest

from supervisor.base.errors import NomadNotFound, NomadUnavailableError
from supervisor.nomad.boundary import (
    meaning_of,
    release_response,
    token_refused,
    translate_status,
    translate_transport_errors,
)


def test_a_status_no_row_covers_is_unavailable_for_that_status_alone() -> None:
    meaning = meaning_of(601, "odd")
    assert meaning is not None
    assert meaning.statuses == range(601, 602)
    assert meaning.error is NomadUnavailableError
    assert meaning.why == "an unknown status"
    assert meaning.covers(601, "anything")
    assert not meaning.covers(602, "anything")


def test_below_400_is_a_success_and_400_is_not() -> None:
    assert meaning_of(399, "") is None
    assert translate_status(399, "", "read") is None
    assert meaning_of(400, "") is not None


def test_the_error_names_what_was_asked_and_carries_nomad_s_answer() -> None:
    error = translate_status(404, "job not found\n", "read job j1")
    assert isinstance(error, NomadNotFound)
    assert str(error) == "read job j1 (HTTP 404: job not found)"
    assert error.status_code == 404
    assert error.body == "job not found\n"


def test_a_transport_error_is_unavailable_and_names_what_was_asked() -> None:
    cause = httpx.ConnectError("connection refused")
    with pytest.raises(NomadUnavailableError) as raised, translate_transport_errors("list jobs"):
        raise cause
    assert str(raised.value) == "list jobs: ConnectError: connection refused"
    assert raised.value.status_code is None
    assert raised.value.__cause__ is cause


def test_other_errors_pass_through_untranslated() -> None:
    with pytest.raises(KeyError), translate_transport_errors("list jobs"):
        raise KeyError("x")


def test_a_released_closed_response_keeps_its_content_and_an_empty_stream() -> None:
    response = httpx.Response(200, content=b'{"a": 1}')
    assert response.is_closed
    release_response(response)
    assert response.content == b'{"a": 1}'
    assert b"".join(response.stream) == b""  # type: ignore[arg-type]


def test_a_response_still_open_keeps_its_stream() -> None:
    stream = httpx.ByteStream(b"body")
    response = httpx.Response(200, stream=stream)
    assert not response.is_closed
    release_response(response)
    assert response.stream is stream


def test_a_refused_token_says_nomad_s_text_and_what_to_do() -> None:
    reason, remedy = token_refused(" ACL token not found\n", "submit-job, read-job")
    assert reason == "Nomad refuses the daemon's token (403 ACL token not found)"
    assert remedy == (
        "nomad.token (NOMAD_TOKEN) is missing, unknown to this cluster, or its policy lacks what the "
        "daemon needs (submit-job, read-job): `supervisor check` tells which"
    )


def test_a_refusal_without_text_is_permission_denied() -> None:
    reason, _ = token_refused("  ", "read-job")
    assert reason == "Nomad refuses the daemon's token (403 Permission denied)"
