"""The tree is data: it is what the README and the daemon's docstring draw, and any of its children
may crash while an execution runs without that execution noticing.

Real clock, as every daemon test here (``conftest.py``). Each crash test builds the daemon's tree
with one child wrapped so that it raises once, when the test says, and is then restarted (or stays
down) as its spec says; the execution running meanwhile must end with its output whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from supervisor.core.config import HaSettings, ServerSettings, Settings
from supervisor.tree import daemon as daemon_module
from supervisor.tree.daemon import TREE, draw_tree
from supervisor.tree.spec import Tree
from supervisor.tree.supervision import ChildRun, PartsT, Starter, TierSpec

from .conftest import Harness, output

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PACKAGE_DOC = ROOT / "docs" / "package.md"
COMMAND = "echo started; sleep 2; echo finished"
# Set by a test when the wrapped child is to crash; made by whichever of the two comes first, and
# dropped at the test's end.
CRASH: dict[str, trio.Event] = {}


def crashing_once(start_child: Starter[PartsT], name: str) -> Starter[PartsT]:
    """``start_child``, the start of ``name``'s child in TREE, wrapped: its run raises once
    CRASH[name] is set, the first time it runs; its restarts run as usual."""
    crashed = False

    def start(parts: PartsT, tier: trio.Nursery) -> ChildRun:
        run = start_child(parts, tier)

        async def crash_once(*, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
            nonlocal crashed
            if crashed:
                await run(task_status=task_status)
                return

            async def bomb() -> None:
                nonlocal crashed
                await CRASH.setdefault(name, trio.Event()).wait()
                crashed = True
                raise RuntimeError(f"{name} crashed on purpose")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(bomb)
                task_status.started(await nursery.start(run))

        return crash_once

    return start


def tiers_crashing(tiers: tuple[TierSpec[PartsT], ...], name: str) -> tuple[TierSpec[PartsT], ...]:
    return tuple(
        attrs.evolve(
            tier,
            children=tuple(
                attrs.evolve(c, start=crashing_once(c.start, name)) if c.name == name else c
                for c in tier.children
            ),
        )
        for tier in tiers
    )


def tree_crashing(name: str) -> Tree:
    return Tree(daemon=tiers_crashing(TREE.daemon, name), term=tiers_crashing(TREE.term, name))


def test_the_readme_and_the_docstring_draw_the_tree_as_it_is() -> None:
    drawing = draw_tree()
    assert drawing.startswith("Daemon.run\n")
    assert all(child.name in drawing for tier in TREE for child in tier.children)
    assert drawing in (daemon_module.__doc__ or "")
    assert f"```\n{drawing}\n```" in README.read_text(), "the README's tree is draw_tree()'s output"


def test_every_module_is_in_the_package_drawing() -> None:
    """Each module is named under its own folder in docs/package.md's drawing of the package."""
    package = ROOT / "supervisor"
    drawing = PACKAGE_DOC.read_text().split("\nsupervisor/\n", 1)[1].split("\n```", 1)[0]
    folders: dict[str, str] = {}
    nesting: list[str] = []
    current = ""
    for line in drawing.splitlines():
        branch = max(line.find("├── "), line.find("└── "))
        if branch >= 0 and branch % 4 == 0:
            depth, name = branch // 4, line[branch + 4 :].split(" ", 1)[0]
            nesting = [*nesting[:depth], name.rstrip("/")] if name.endswith("/") else nesting[:depth]
            current = "/".join(nesting)
        folders[current] = folders.get(current, "") + line + "\n"
    missing = [
        path.relative_to(package).as_posix()
        for path in sorted(package.rglob("*.py"))
        if path.name != "__init__.py"
        and path.name not in folders.get(path.parent.relative_to(package).as_posix().strip("."), "")
    ]
    assert missing == []


def test_every_child_spec_says_what_it_is() -> None:
    for tier in TREE:
        for child in tier.children:
            assert child.role, child.name
            assert 0.0 <= child.share <= 1.0


CHILDREN = [child.name for tier in TREE for child in tier.children if not child.ha_only]


@pytest.mark.parametrize("tree", [tree_crashing(name) for name in CHILDREN], ids=CHILDREN)
async def test_a_crash_of_any_child_leaves_a_running_execution_whole(harness: Harness, tree: Tree) -> None:
    (name,) = {c.name for tier in tree for c in tier.children if c.start.__name__ == "start"}
    await harness.environment(10)
    runner = await harness.runner(10)
    restarts = harness.daemon.restarts.total

    async def crash() -> None:
        CRASH.setdefault(name, trio.Event()).set()
        await trio.sleep(0.1)

    messages = await harness.run_until_end(runner, COMMAND, crash)
    assert messages[-1] == {"type": "exit", "data": 0}, name
    assert output(messages) == "started\r\nfinished\r\n", "the output is whole"
    assert harness.daemon.failure is None
    child = next(c for t in tree for c in t.children if c.name == name)
    if child.restart.value != "temporary":
        assert harness.daemon.restarts.total == restarts + 1, f"{name} was restarted"
    again = await harness.execute(runner, command="echo ok")
    assert again[-1] == {"type": "exit", "data": 0}, "the daemon serves on"
    del CRASH[name]


@pytest.mark.parametrize(
    ("tree", "settings"),
    [(tree_crashing("lock hold"), Settings(server=ServerSettings(port=0), ha=HaSettings(enabled=True)))],
    ids=["lock hold"],
)
async def test_a_crash_of_the_ha_hold_steps_down_and_lets_the_running_execution_finish(
    harness: Harness, tree: Tree, settings: Settings
) -> None:
    """With [ha] (what this test is about): the hold's crash ends the term, as a lost lock does;
    the lock is given up, since whether it is still this daemon's is unknown, and taken again."""
    await harness.wait_for(
        lambda: harness.daemon.service is not None and harness.service.informer.is_synced()
    )
    await harness.environment(10)
    runner = await harness.runner(10)
    first = harness.service
    acting_at_release: list[bool] = []
    release = harness.daemon.elector.release

    async def noted_release() -> None:
        acting_at_release.append(harness.daemon.acting)
        await release()

    harness.daemon.elector.release = noted_release  # type: ignore[method-assign]

    async def crash() -> None:
        CRASH.setdefault("lock hold", trio.Event()).set()
        await harness.wait_for(lambda: harness.daemon.switch.app is None)

    messages = await harness.run_until_end(runner, COMMAND, crash)
    assert acting_at_release[:1] == [False], "the lock goes once the term's informer and effects are gone"
    assert messages[-1] == {"type": "exit", "data": 0}
    assert output(messages) == "started\r\nfinished\r\n", "the output is whole"
    await harness.wait_for(
        lambda: harness.daemon.service is not first and harness.service.informer.is_synced()
    )
    again = await harness.execute(runner, command="echo ok")
    assert again[-1] == {"type": "exit", "data": 0}, "active again, with the claim adopted"
    del CRASH["lock hold"]
