"""Shared fixtures.

How tests are written here:
- pytest-trio in trio_mode: every ``async def test_*`` runs under trio.
- Time that passes is virtual: tests that wait for a timeout, a backoff or a heartbeat take the
  ``autojump_clock`` fixture and assert exact ``trio.current_time()`` figures.
- Servers listen on 127.0.0.1 port 0 and are started with ``await nursery.start(...)``.
- Tasks are ordered with ``wait_all_tasks_blocked()`` or explicit events, never with sleeps.
- Each test has a hard cap (pytest-timeout, thread method; the signal method breaks trio).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from loguru import logger

FIXTURES = Path(__file__).parent / "fixtures"


def load_fixture(name: str) -> Any:
    return orjson.loads((FIXTURES / name).read_bytes())


@pytest.fixture
def fixture_json() -> Any:
    return load_fixture


@pytest.fixture
def log_records() -> Iterator[list[Any]]:
    """Every loguru record logged while the test runs."""
    captured: list[Any] = []
    sink = logger.add(lambda message: captured.append(message.record), level="DEBUG")
    yield captured
    logger.remove(sink)
