"""A task's events (``TaskEvent``) as a Nomad client records them on its allocation."""

from __future__ import annotations

from typing import Any

__all__ = ["task_event"]


def task_event(kind: str, display: str, time_ns: int, **fields: Any) -> dict[str, Any]:
    """A TaskEvent with every field, as Nomad encodes it (TaskEvent has no omitempty)."""
    event: dict[str, Any] = {
        "Details": {},
        "DiskLimit": 0,
        "DisplayMessage": display,
        "DownloadError": "",
        "DriverError": "",
        "DriverMessage": "",
        "ExitCode": 0,
        "FailedSibling": "",
        "FailsTask": False,
        "GenericSource": "",
        "KillError": "",
        "KillReason": "",
        "KillTimeout": 0,
        "Message": "",
        "RestartReason": "",
        "SetupError": "",
        "Signal": 0,
        "StartDelay": 0,
        "TaskSignal": "",
        "TaskSignalReason": "",
        "Time": time_ns,
        "Type": kind,
        "ValidationError": "",
        "VaultError": "",
    }
    event.update(fields)
    return event
