"""The fuzzing's own checks (``scripts/fuzz_checks.py``) pass the answers Poseidon's contract gives
for a condition of the cluster, and fail every other server error."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import orjson
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fuzz_checks.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_checks_under_test", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@attrs.frozen
class Answer:
    status_code: int
    body: dict[str, Any]

    def json(self) -> Any:
        return self.body

    @property
    def text(self) -> str:
        return orjson.dumps(self.body).decode()


@attrs.frozen
class Case:
    path: str


CHECKS = load()


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/runners", 500, "NOMAD_OVERLOAD"),
        ("/health", 503, "PREWARMING_POOL_DEPLETING"),  # a generated environment's pool, filling (CI)
        ("/api/v1/health", 503, "NOMAD_UNREACHABLE"),
    ],
)
def test_a_condition_of_the_cluster_passes(path: str, status: int, code: str) -> None:
    CHECKS.no_server_error_but_overload(None, Answer(status, {"message": "m", "errorCode": code}), Case(path))


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/runners", 500, "NOMAD_INTERNAL_SERVER_ERROR"),
        ("/runners", 503, "PREWARMING_POOL_DEPLETING"),
        ("/health", 500, "PREWARMING_POOL_DEPLETING"),
        ("/health", 503, "UNKNOWN"),
    ],
)
def test_every_other_server_error_fails(path: str, status: int, code: str) -> None:
    with pytest.raises(AssertionError):
        CHECKS.no_server_error_but_overload(
            None, Answer(status, {"message": "m", "errorCode": code}), Case(path)
        )
