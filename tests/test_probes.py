"""Probes of suspect runners: an exec of ``true`` that exits 0 proves the runner's allocation; any
other answer leaves it suspect; one probe per runner at a time, and a bounded number at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from supervisor.base.errors import ExecRejected
from supervisor.core.evidence import RunnerProven
from supervisor.effects.probes import PARALLEL_PROBES, PROBE_COMMAND, RunnerProbes
from supervisor.nomad.exec import ExecExited


class _Session:
    def __init__(self, code: int, pause: float) -> None:
        self._code = code
        self._pause = pause

    async def wait_exit(self, **_: Any) -> tuple[ExecExited, bytes, bytes]:
        await trio.sleep(self._pause)
        return ExecExited(self._code), b"", b""


class _Agents:
    """Answers each allocation's exec as told: an exit code, or a refusal (None)."""

    def __init__(self, answers: dict[str, int | None], pause: float = 0.0) -> None:
        self.answers = answers
        self.pause = pause
        self.commands: list[tuple[str, Sequence[str]]] = []
        self.running = self.most = 0

    @asynccontextmanager
    async def open_exec(self, alloc_id: str, *, task: str, command: Sequence[str]) -> AsyncIterator[_Session]:
        self.commands.append((alloc_id, command))
        code = self.answers[alloc_id]
        if code is None:
            raise ExecRejected(1008, 'task "t" is not running.')
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            yield _Session(code, self.pause)
        finally:
            self.running -= 1


async def _probed(agents: _Agents, runners: dict[str, str]) -> list[object]:
    told: list[object] = []
    async with trio.open_nursery() as nursery:
        probes = RunnerProbes(agents, told.append, task="t", nursery=nursery)  # type: ignore[arg-type]
        for runner_id, alloc_id in runners.items():
            probes.probe(runner_id, alloc_id)
            probes.probe(runner_id, alloc_id)  # already under way: not probed twice
    return told


async def test_a_probe_that_exits_0_proves_its_allocation_and_nothing_else_does() -> None:
    agents = _Agents({"a-ok": 0, "a-fails": 1, "a-refused": None})
    told = await _probed(agents, {"r-ok": "a-ok", "r-fails": "a-fails", "r-refused": "a-refused"})
    assert told == [RunnerProven("r-ok", "a-ok")]
    assert sorted(agents.commands) == [(a, PROBE_COMMAND) for a in ("a-fails", "a-ok", "a-refused")]


async def test_probes_run_a_bounded_number_at_once(autojump_clock: trio.abc.Clock) -> None:
    runners = {f"r{i}": f"a{i}" for i in range(3 * PARALLEL_PROBES)}
    agents = _Agents(dict.fromkeys(runners.values(), 0), pause=1.0)
    told = await _probed(agents, runners)
    assert len(told) == len(runners)
    assert agents.most == PARALLEL_PROBES


async def test_a_probe_without_an_answer_says_nothing(autojump_clock: trio.abc.Clock) -> None:
    agents = _Agents({"a": 0}, pause=3600.0)
    assert await _probed(agents, {"r": "a"}) == []
