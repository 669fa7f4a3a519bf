"""What the chaos soak saw: the environments it loads, every execution's life, the faults, the
looks at the pools and the daemon's samples, and which fault can have ended an execution."""

from __future__ import annotations

import threading
import time
from typing import Any, Final

from soak_faults import EVERYWHERE, REACH

from supervisor.core.config import FactorySettings

ENVIRONMENTS: Final = (10, 11, 12)
POOL: Final = 30


class Soak:
    """What the load and the faults saw."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lives: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.handed_out: set[str] = set()
        # Every execution that ended in error, with the fault it is attributed to (None: none).
        self.errors: list[dict[str, Any]] = []
        self.violations: dict[str, list[Any]] = {
            "terminal_messages": [],
            "unexplained_errors": [],
            "lost_output": [],
            "handed_out_twice": [],
            "workspace_not_empty": [],
        }
        # (t, each environment's idle runners), four times a second.
        self.looks: list[tuple[float, dict[int, int]]] = []
        self.retries = 0
        self.client_errors = 0
        self.shed = 0
        self.load_ended = float("inf")
        self.sampled = threading.Event()
        # The daemon's runner starts, from its /metrics: bucket bound -> starts at or below it.
        self.start_seconds: dict[str, float] = {}
        # The daemon's factory.max_starting (its default, unless --setting changes it).
        self.max_starting = FactorySettings().max_starting

    def now(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def culprit(self, start: float, end: float, node: str, runner: str) -> dict[str, Any] | None:
        """The fault that can have ended an execution on ``runner`` (on ``node``) between
        ``start`` and ``end``: one that reached it then, and hit its node, its job, or everything."""
        fault: dict[str, Any]
        for fault in reversed(self.faults):
            if fault["kind"] not in REACH or not fault["t"] - 1 <= end:
                continue
            if start > fault["t"] + REACH[fault["kind"]]:
                continue
            if fault["kind"] in EVERYWHERE or fault["target"] in (node, runner):
                return fault
        return None
