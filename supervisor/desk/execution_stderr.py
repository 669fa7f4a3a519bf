"""An execution's stderr kept apart from its terminal, as Poseidon keeps it (``interactivestderr``).

On a terminal a command's stdout and stderr are one stream. So the command's stderr goes to a fifo
in the runner, and a second exec on the same lease, without a terminal, reads that fifo
(``stderr_reader_command``); its output is the execution's ``stderr``. The two execs start together:
both sides make the fifo if it is not there yet, each side's open waits for the other's (so nothing
is written before the reader is there, and nobody polls), and the reader removes the name once both
opened it. The execution's exit is the command's, sent once the reader has read to the end (every
writer closed the fifo), or ``STDERR_DRAIN`` after the exit if a background process keeps it open.

When one of the two sessions fails, the execution ends as when its command's session fails: its
command and the reader are stopped (one stop ends both, and removes the fifo), and the client gets
the error. Only when both found the runner's agent out of reach did nothing run, and it may be tried
again: the reader waits ``SIBLING_WAIT`` for the command's session to find that too.
"""

from __future__ import annotations

import codecs
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio
from attrs import define, field
from loguru import logger

from ..base.errors import ExecAgentUnreachable, ExecConnectionLost, SupervisorError
from ..core.commands import stderr_reader_command
from ..nomad import ExecExited
from ..nomad.api import ExecOpener

__all__ = ["SIBLING_WAIT", "STDERR_DRAIN", "StderrReader"]

# How long stderr is still read after the command exited (a background process may hold it open).
STDERR_DRAIN: Final = 1.0
# How long one session that found the agent out of reach waits for the other to find that too.
SIBLING_WAIT: Final = 1.0


@define(eq=False)
class StderrReader:
    """The session reading an execution's stderr, and what it found."""

    execution_id: str
    alloc_id: str
    task: str
    # Its stdout frames: the command's stderr.
    output: bool = False
    # It read to the end, or failed.
    done: trio.Event = field(factory=trio.Event)
    failure: SupervisorError | None = None

    @property
    def ran_nothing(self) -> bool:
        """It found the agent out of reach before anything came: no reader ran."""
        return isinstance(self.failure, ExecAgentUnreachable) and not self.output

    async def run(self, client: ExecOpener, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Read the fifo in a second exec, sending what comes as ``stderr`` messages."""
        try:
            async with client.open_exec(
                self.alloc_id, task=self.task, command=stderr_reader_command(self.execution_id)
            ) as session:
                decoder = codecs.getincrementaldecoder("utf-8")("replace")
                async for frame in session:
                    if isinstance(frame, ExecExited):
                        if rest := decoder.decode(b"", final=True):
                            await send({"type": "stderr", "data": rest})
                        if frame.exit_code:
                            logger.debug(
                                "the stderr reader of {} exited {}", self.execution_id, frame.exit_code
                            )
                        self.done.set()
                        break
                    if frame.stream != "stdout":
                        continue  # the reader's own complaints, not the command's
                    self.output = True
                    if text := decoder.decode(frame.data):
                        await send({"type": "stderr", "data": text})
        except ExecAgentUnreachable as error:
            self.failure = error
            if self.output:
                raise
            self.done.set()
            # The command's session, to the same agent, is cut by this too (and ends the attempt,
            # cancelling this wait); if it is not, its command waits for a reader that never comes.
            await trio.sleep(SIBLING_WAIT)
            raise ExecConnectionLost(
                f"the session reading stderr could not reach the runner's agent ({error}); "
                "the command's could"
            ) from error
        except SupervisorError as error:
            self.failure = error
            raise
        finally:
            self.done.set()

    async def drained(self) -> None:
        """Wait for the reader to have read to the end, for at most STDERR_DRAIN."""
        with trio.move_on_after(STDERR_DRAIN):
            await self.done.wait()
        if not self.done.is_set():
            logger.debug("stderr of {} was still open {}s after its exit", self.execution_id, STDERR_DRAIN)

    async def settled_for(self, unreachable: ExecAgentUnreachable) -> SupervisorError:
        """What ends an attempt whose command's session found the agent out of reach: that, when the
        reader found it too (nothing ran), else an unknown outcome (the reader may run: it is
        stopped)."""
        with trio.move_on_after(SIBLING_WAIT):
            await self.done.wait()
        if self.ran_nothing:
            return unreachable
        return ExecConnectionLost(
            f"the command's session could not reach the runner's agent ({unreachable}); "
            "the session reading its stderr could"
        )
