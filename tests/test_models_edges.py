"""The models' parts kept raw, at the edge: read before the decoders were handed down, they say so
instead of answering wrong."""

from __future__ import annotations

import pytest

from supervisor.nomad import Allocation, models


def test_a_raw_part_read_without_the_decoders_is_a_programming_error_that_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(models, "_decoder", None)
    with pytest.raises(RuntimeError) as raised:
        _ = Allocation(raw={"Namespace": "default"}).namespace
    assert str(raised.value) == "supervisor.nomad.decode was never imported"


def test_a_raw_part_is_decoded_on_read() -> None:
    allocation = Allocation(raw={"Namespace": "default", "CreateTime": 5})
    assert (allocation.namespace, allocation.create_time_ns) == ("default", 5)
