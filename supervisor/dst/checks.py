"""The promises, checked as the run goes (each claim, each message, each answer) and at its end.

1. No runner ID is handed out twice.
2. A claimed runner is alive in the cluster's ground truth (its container runs), unless it died
   less than EVENT_BOUND before the claim in a write of Nomad's that told it. A death no write told
   (a job Nomad forgot, a container an agent came back without) has no tolerance, whatever Nomad
   writes of it later: the runners of a restarted agent are never handed out before evidence newer
   than the restart proves them.
2b. A claimed runner's node does not drain in the cluster's ground truth, unless its drain began
   less than EVENT_BOUND before the claim was asked.
3. No execution is ended by the daemon (an error, a timeout not asked for, a socket dropped) unless
   a fault on its runner, its node, a server or the daemon itself explains it; exactly one terminal
   message per execution.
4. Output is never foreign (always a prefix of what the command writes) and never lost (whole when
   the command exited).
5. After the quiet period, Nomad's runner jobs are the daemons' idle and used runners, and every
   pool is at its size.
6. Health tells the truth: OK at the end, with full pools and the stream up.
7. With HA, at most one daemon acts at any instant.
"""

from __future__ import annotations

from typing import Any, Final

import trio
from attrs import define, field

from .faults import FaultLog
from .overdue import Overdue
from .trace import Trace
from .truth import Truth

__all__ = ["EVENT_BOUND", "Checks", "Execution", "Violation"]

# A runner's death that Nomad wrote (an event, a listing) is known within this many seconds.
EVENT_BOUND: Final = 10.0
_FINE_REFUSALS: Final = ("NOMAD_OVERLOAD", "NOMAD_UNREACHABLE", "STANDBY")
_ENDED: Final = "3 no execution or request ended by the daemon"
_LOST: Final = "4 output never lost"


@define
class Violation:
    """A promise broken: which, when (virtual seconds), and what was seen."""

    promise: str
    at: float
    details: str


@define(eq=False)
class Execution:
    """One execution as its client saw it."""

    runner: str
    node: str
    started: float
    stdout_expected: str
    stderr_expected: str
    exit_expected: int | None
    messages: list[dict[str, Any]] = field(factory=list)
    stdout: str = ""
    stderr: str = ""
    terminals: list[dict[str, Any]] = field(factory=list)
    dropped: str = ""
    close_code: int | None = None
    # The handshake's answer when the daemon refused it (410: the runner went before it started).
    rejected: int | None = None
    gone: bool = False
    checks: Checks | None = None

    def message(self, message: dict[str, Any]) -> None:
        """One message, checked as it comes: output never foreign."""
        self.messages.append(message)
        kind = message.get("type")
        if kind == "stdout":
            self.stdout += message.get("data", "")
            if not self.stdout_expected.startswith(self.stdout) and self.checks is not None:
                self.checks.violate("4 output never foreign", f"{self.runner}: stdout {self.stdout[-80:]!r}")
        elif kind == "stderr":
            self.stderr += message.get("data", "")
            if not self.stderr_expected.startswith(self.stderr) and self.checks is not None:
                self.checks.violate("4 output never foreign", f"{self.runner}: stderr {self.stderr[-80:]!r}")
        elif kind in ("exit", "timeout", "error"):
            self.terminals.append(message)

    def closed(self, code: int | None) -> None:
        """The WebSocket closed (after the terminal message, or without one)."""
        self.close_code = code


@define(eq=False)
class Checks:
    """Every promise, checked against the world's ground truth and its fault log."""

    truth: Truth
    faults: FaultLog
    trace: Trace
    violations: list[Violation] = field(factory=list)
    handed_out: dict[str, float] = field(factory=dict)
    claims: int = 0
    executions: int = 0
    notes: list[str] = field(factory=list)
    abandoned_runners: dict[str, float] = field(factory=dict)
    # The daemons that acted at the last write to the cluster.
    writers: tuple[str, ...] = ()
    # Promises 8 and 9, once the run has set them up.
    overdue: Overdue | None = None

    def violate(self, promise: str, details: str) -> None:
        """Record a broken promise."""
        now = trio.current_time()
        self.violations.append(Violation(promise, now, details))
        self.trace.record("violation", f"{promise}: {details}")

    def note(self, text: str) -> None:
        """Something a client met that the daemon did not answer (a refused connection)."""
        self.trace.record("note", text)
        if self.faults.active("daemon_kill", trio.current_time()) is None:
            self.violate("3 no execution or request ended by the daemon", f"unanswered: {text}")

    def wrote(self, acting: list[str]) -> None:
        """Promise 7, at every write to the cluster: at most one daemon acts (reads and writes
        Nomad) at that instant. Said once per overlap."""
        if len(acting) > 1 and len(self.writers) <= 1:
            self.violate("7 at most one daemon acts", f"{', '.join(acting)} act at once")
        self.writers = tuple(acting)

    # -- claims ---------------------------------------------------------------------------------

    def claimed(self, runner: str, environment: int, *, asked: float | None = None) -> None:
        """Promises 1, 2 and 2b, at the claim (answered now, asked at ``asked``)."""
        now = trio.current_time()
        self.claims += 1
        self.trace.record("claim", f"{runner} env {environment}")
        if runner in self.handed_out:
            self.violate("1 no runner handed out twice", f"{runner} (first at {self.handed_out[runner]:.3f})")
        self.handed_out[runner] = now
        if self.truth.is_alive(runner):
            self._not_draining(runner, now if asked is None else asked)
            return
        died = self.truth.died_at.get(runner)
        silent = runner in self.truth.silent_deaths
        if died is not None and not silent and now - died < EVENT_BOUND:
            return
        if died is None:
            since = "never alive"
        else:
            since = f"dead since {died:.3f} ({'no write of Nomad told it' if silent else 'written'})"
        self.violate("2 a claimed runner is alive", f"{runner}: {since}")

    def _not_draining(self, runner: str, asked: float) -> None:
        """Promise 2b: no runner on a node that drains, unless the drain began so shortly before
        the claim that its event may not have reached the daemon yet."""
        node = self.truth.node_of(runner)
        began = self.truth.drain_began(node)
        if began is not None and asked - began >= EVENT_BOUND:
            drains = f"{runner} on {node}, draining since {began:.3f}"
            self.violate("2b a claimed runner's node does not drain", drains)

    @staticmethod
    def for_now(status: int, text: str) -> bool:
        """An answer that says "not now" in Poseidon's codes (overload, Nomad unreachable, the
        standby's): a client may try again."""
        return status in (500, 503) and any(code in text for code in _FINE_REFUSALS)

    def refused(self, student: str, what: str, status: int, text: str) -> None:
        """A claim answered otherwise than 200: fine when it says why in Poseidon's codes."""
        self.trace.record("refused", f"{student} {what} {status}")
        if status in (500, 503) and any(code in text for code in _FINE_REFUSALS):
            return
        self.violate(
            "3 no execution or request ended by the daemon", f"{what} answered {status}: {text[:200]}"
        )

    def answered(self, runner: str, what: str, status: int, text: str) -> bool:
        """A call on a claimed runner answered otherwise than success; False: the runner is gone."""
        self.trace.record("answered", f"{runner} {what} {status}")
        if status == 410:
            return False
        if status in (500, 503) and any(code in text for code in _FINE_REFUSALS):
            return True
        if self._explained(runner, trio.current_time() - 1.0) is None:
            self.violate(
                "3 no execution or request ended by the daemon", f"{runner} {what} {status}: {text[:200]}"
            )
        return False

    def released(self, runner: str, status: int, text: str) -> None:
        """The client gave the runner back."""
        self.trace.record("release", f"{runner} {status}")
        if status not in (204, 410):
            self.violate(
                "3 no execution or request ended by the daemon", f"release {runner}: {status} {text[:200]}"
            )

    def abandoned(self, runner: str, timeout: int) -> None:
        """The client walked away: the runner goes at its inactivity timeout (or never, with 0)."""
        self.trace.record("abandon", f"{runner} timeout {timeout}")
        self.abandoned_runners[runner] = timeout
        if self.overdue is not None:
            self.overdue.abandoned(runner, timeout, trio.current_time())

    # -- executions -----------------------------------------------------------------------------

    def started(self, runner: str, stdout: str, stderr: str, exit_code: int | None) -> Execution:
        """An execution about to connect."""
        self.executions += 1
        self.trace.record("execute", runner)
        node = self.truth.node_of(runner)
        return Execution(runner, node, trio.current_time(), stdout, stderr, exit_code, checks=self)

    def ended(self, execution: Execution) -> None:
        """Promises 3 and 4, once the execution's socket closed."""
        terminal = execution.terminals[0] if execution.terminals else None
        self.trace.record(
            "ended", f"{execution.runner} {terminal} {execution.close_code} {execution.dropped}"
        )
        if len(execution.terminals) > 1:
            self.violate("3 exactly one terminal message", f"{execution.runner}: {execution.terminals}")
        if execution.rejected == 410:
            execution.gone = True
            return
        expected_kind = "exit" if execution.exit_expected is not None else "timeout"
        if terminal is not None and terminal["type"] == expected_kind:
            if expected_kind == "exit" and terminal.get("data") != execution.exit_expected:
                self.violate(
                    "4 output never lost", f"{execution.runner}: {terminal} != {execution.exit_expected}"
                )
            whole = (
                execution.stdout == execution.stdout_expected
                and execution.stderr == execution.stderr_expected
            )
            if expected_kind == "exit" and not whole:
                self.violate("4 output never lost", f"{execution.runner}: stdout {execution.stdout[-80:]!r}")
            return
        if terminal is not None and terminal["type"] == "error":
            execution.gone = True
        what = f"{execution.runner}: {terminal or execution.dropped or 'closed without a terminal message'}"
        if self._explained(execution.runner, execution.started) is None:
            self.violate("3 no execution or request ended by the daemon", what)

    def _explained(self, runner: str, since: float) -> str | None:
        """The fault that explains a failure on ``runner`` between ``since`` and now, if any."""
        node = self.truth.node_of(runner)
        now = trio.current_time()
        if not self.truth.is_alive(runner):
            died = self.truth.died_at.get(runner, now)
            if died <= now:
                return f"the runner died at {died:.3f}"
        return self.faults.explains(node, since, now)
