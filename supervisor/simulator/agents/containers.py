"""Where the simulated agents' exec runs a command: the seam between an exec session and the task's
container.

``ProcessContainers`` (the default) runs each command as a local process in the allocation's own
directory: a development driver, not an isolation boundary. The process gets nothing of the host's
environment but PATH, plus HOME and TMPDIR in the allocation's directory and the ``NOMAD_*``
variables Nomad gives every task, and a session of its own, so that killing it kills what it started.
It imitates CodeOcean's images (``image_tools.py``: ``/sbin/setuser``, the host's bash and GNU
tools); with ``tty`` it runs on a real pseudo-terminal (``terminal.py``).

A deterministic simulation gives the cluster a model instead (``command_model.ModelContainers``):
the same shape, on trio's clock, without a process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Protocol

import trio

from ..state.images import image_variables
from ..state.objects import SimAlloc
from ..state.store import ClusterState
from .image_tools import ImageTools
from .terminal import open_terminal_process

__all__ = ["Containers", "ProcessContainers", "RunningCommand"]


class RunningCommand(Protocol):
    """A command started in a task: its pipes, its exit, and a way to kill it (and what it started)."""

    @property
    def stdin(self) -> trio.abc.SendStream | None:
        """The command's standard input."""
        ...

    @property
    def stdout(self) -> trio.abc.ReceiveStream | None:
        """The command's standard output."""
        ...

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None:
        """The command's standard error."""
        ...

    @property
    def returncode(self) -> int | None:
        """The exit status, None while it runs."""
        ...

    async def wait(self) -> int:
        """The exit status once it exits; negative: killed by that signal."""
        ...

    def kill(self) -> None:
        """Kill the command and everything it started."""
        ...

    async def reap(self) -> None:
        """Close the pipes of a killed or exited command and wait for it."""
        ...

    def resize(self, *, height: int, width: int) -> None:
        """The new window size of the command's terminal (nothing without one)."""


class Containers(Protocol):
    """The tasks' containers, as exec sees them."""

    async def start(
        self, alloc: SimAlloc, task: str, command: list[str], *, nursery: trio.Nursery, tty: bool = False
    ) -> RunningCommand:
        """Start ``command`` in the task (a command that runs as tasks runs them in ``nursery``, the
        cluster's), on a terminal with ``tty`` (then ``stderr`` is None: the terminal's output is
        ``stdout``); OSError when it cannot be started."""
        ...

    def reset(self, alloc: SimAlloc) -> None:
        """The allocation's task restarted in a fresh container: its workspace is wiped."""
        ...

    def remove_all(self) -> None:
        """The cluster stopped: every workspace goes."""
        ...


class _Process:
    """A trio.Process whose kill signals its whole process group."""

    def __init__(self, process: trio.Process) -> None:
        self._process = process
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.stderr = process.stderr

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        return await self._process.wait()

    def kill(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)

    async def reap(self) -> None:
        for pipe in (self.stdin, self.stdout, self.stderr):
            if pipe is not None:
                await pipe.aclose()
        await self._process.wait()

    def resize(self, *, height: int, width: int) -> None:
        """No terminal: nothing to resize."""


class ProcessContainers:
    """Each command a local process in ``root/<alloc id>/<task>``."""

    def __init__(self, state: ClusterState, root: Path) -> None:
        self.state = state
        self.root = root
        self.tools = ImageTools(root / ".image-tools")

    def workspace(self, alloc: SimAlloc, task: str) -> Path:
        """The directory the allocation's task runs in (created on first use)."""
        path = self.root / alloc.id / task
        path.mkdir(parents=True, exist_ok=True)
        return path

    def environment(self, alloc: SimAlloc, task: str) -> dict[str, str]:
        """The environment a command of the task gets: PATH, HOME and TMPDIR in the allocation, NOMAD_*."""
        directory = str(self.workspace(alloc, task))
        scratch = self.root / alloc.id / "tmp"
        scratch.mkdir(parents=True, exist_ok=True)
        return {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": directory,
            "TMPDIR": str(scratch),
            **nomad_variables(self.state, alloc, task, alloc_dir=str(self.root / alloc.id)),
        }

    async def start(
        self, alloc: SimAlloc, task: str, command: list[str], *, nursery: trio.Nursery, tty: bool = False
    ) -> RunningCommand:
        """A local process in the task's directory, in a session of its own (on a terminal with
        ``tty``), with the image's tool paths mapped to their imitations."""
        command = self.tools.mapped(command)
        if tty:
            return await open_terminal_process(
                command, cwd=self.workspace(alloc, task), env=self.environment(alloc, task)
            )
        process = await trio.lowlevel.open_process(
            command,
            cwd=self.workspace(alloc, task),
            env=self.environment(alloc, task),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        return _Process(process)

    def reset(self, alloc: SimAlloc) -> None:
        """Remove the allocation's directory."""
        shutil.rmtree(self.root / alloc.id, ignore_errors=True)

    def remove_all(self) -> None:
        """Remove every allocation's directory."""
        shutil.rmtree(self.root, ignore_errors=True)


def nomad_variables(state: ClusterState, alloc: SimAlloc, task: str, *, alloc_dir: str) -> dict[str, str]:
    """The ``NOMAD_*`` variables Nomad gives every task."""
    return {
        "NOMAD_ALLOC_ID": alloc.id,
        "NOMAD_ALLOC_NAME": alloc.name,
        "NOMAD_ALLOC_DIR": alloc_dir,
        "NOMAD_TASK_DIR": f"{alloc_dir}/{task}",
        "NOMAD_TASK_NAME": task,
        "NOMAD_GROUP_NAME": alloc.task_group,
        "NOMAD_JOB_ID": alloc.job_id,
        "NOMAD_JOB_NAME": alloc.job_id,
        "NOMAD_NAMESPACE": alloc.namespace,
        "NOMAD_DC": state.config.datacenter,
        "NOMAD_REGION": state.config.region,
        **image_variables(alloc.images, task),
    }
