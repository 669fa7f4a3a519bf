"""What one check of ``supervisor check`` found: a status, a line of detail, and the fix."""

from __future__ import annotations

import enum
from typing import final

from attrs import frozen

__all__ = ["CheckResult", "Status", "exit_code", "format_result", "summary"]


class Status(enum.Enum):
    """A check's outcome; only FAIL makes the command exit 1."""

    OK = "OK"
    # It works, at a cost the detail names.
    WARN = "WARN"
    FAIL = "FAIL"
    # Not run, and the detail says why.
    SKIP = "SKIP"


@final
@frozen
class CheckResult:
    """One check's outcome: what was found, how to fix a failure, and any lines of detail."""

    name: str
    status: Status
    detail: str
    fix: str = ""
    lines: tuple[str, ...] = ()


def format_result(result: CheckResult) -> list[str]:
    """The result's line (status, name, detail, fix), then its detail lines, indented."""
    head = f"{result.status.value:<4}  {result.name:<14} {result.detail}"
    if result.fix:
        head += f" Fix: {result.fix}"
    return [head, *(f"      {line}" for line in result.lines)]


def exit_code(results: list[CheckResult]) -> int:
    """1 if any check failed, 0 otherwise."""
    return 1 if any(r.status is Status.FAIL for r in results) else 0


def summary(results: list[CheckResult]) -> str:
    """One line: how many checks passed, warned, failed and were skipped."""
    counts = {status: sum(r.status is status for r in results) for status in Status}
    return (
        f"{counts[Status.OK]} OK, {counts[Status.WARN]} warnings, {counts[Status.FAIL]} failed, "
        f"{counts[Status.SKIP]} skipped"
    )
