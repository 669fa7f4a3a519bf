"""What the deterministic load's clients expect of a command, as the daemon's settings run it."""

from __future__ import annotations

from supervisor.core.config import ExecutionSettings
from supervisor.dst.load import Command


def test_on_the_default_terminal_the_echo_comes_first_and_lines_end_in_crlf() -> None:
    command = Command("cat", "t1\n", exit=None, stdin="t1\n")
    seen = command.as_run(ExecutionSettings())
    assert (seen.stdout, seen.stderr) == ("t1\r\nt1\r\n", "")
    failing = Command("echo t2 >&2; exit 3", "", stderr="t2\n", exit=3).as_run(ExecutionSettings())
    assert (failing.stdout, failing.stderr, failing.exit) == ("", "t2\n", 3), "stderr apart, as written"


def test_merged_on_the_terminal_or_without_one() -> None:
    command = Command("echo t2 >&2; exit 3", "", stderr="t2\n", exit=3)
    merged = command.as_run(ExecutionSettings(interactive_stderr=False))
    assert (merged.stdout, merged.stderr) == ("t2\r\n", "")
    assert command.as_run(ExecutionSettings(tty=False)) is command, "no terminal: as the command writes it"
