"""One writer, many readers: outside ``supervisor/core/`` the runner pool is changed only through
its one entry (``RunnerPool.handle``, called by the effects), and read only through ``PoolView``'s
methods, never its structures. Only the wiring builds a ``RunnerPool``.

Plain sync tests over the package's source (ast); a check that finds nothing is shown to find a
planted breach.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

from supervisor.core.pool import RunnerPool
from supervisor.core.pool_view import PoolView

PACKAGE: Final = Path(__file__).resolve().parents[1] / "supervisor"
# What changes the pool: its public methods that its view does not have (only ``handle`` is a door).
MUTATORS: Final = frozenset(
    name
    for name in dir(RunnerPool)
    if not name.startswith("_") and callable(getattr(RunnerPool, name)) and not hasattr(PoolView, name)
)
# The structures the view shares with the pool: read through its methods only.
STRUCTURES: Final = frozenset(
    {"runners", "environments", "tombstones", "found_gone", "nodes", "listed_index"}
)
# The effects carry out what the pool decides, so they alone hand it changes.
HANDLERS: Final = frozenset({"effects/effects.py", "effects/factory.py", "effects/agent_locator.py"})
WIRING: Final = "desk/service.py"


def breaches(module: str, source: str) -> list[str]:
    """Where ``source`` (the module ``module``, outside core/) changes the pool or reads inside it."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        imported = isinstance(node, ast.ImportFrom) and (node.module or "").endswith("core.pool")
        if imported and module != WIRING:
            found.append(f"{module}:{getattr(node, 'lineno', 0)} imports RunnerPool")
        if not isinstance(node, ast.Attribute):
            continue
        owner = ast.unparse(node.value).lower()
        if "pool" not in owner and "view" not in owner:
            continue
        where = f"{module}:{node.lineno} {ast.unparse(node)}"
        if node.attr in MUTATORS and not (node.attr == "handle" and module in HANDLERS):
            found.append(f"{where}: a change not through the effects' door")
        elif node.attr in STRUCTURES or (node.attr.startswith("_") and not owner.endswith("self")):
            found.append(f"{where}: the pool's structures, not its view's methods")
    return found


def test_outside_core_the_pool_has_one_door_and_one_view() -> None:
    found = [
        breach
        for path in sorted(PACKAGE.rglob("*.py"))
        if not (module := path.relative_to(PACKAGE).as_posix()).startswith(("core/", "simulator/"))
        for breach in breaches(module, path.read_text())
    ]
    assert found == []


def test_the_pools_changes_are_read_from_its_code() -> None:
    assert {"handle", "evidence", "claim", "release", "reconcile"} <= MUTATORS
    assert not MUTATORS & {"stats", "runner", "used_runner", "view", "entropy"}


def test_the_check_finds_a_change_and_a_read_past_the_view() -> None:
    planted = """
from ..core.pool import RunnerPool
def claim(self):
    self._pool.claim(10, 60, 0.0)
    self._pool.handle(fact, at)
    return self.pool.runners["10-a"], self._pool.view._idle
"""
    found = breaches("desk/desk.py", planted)
    assert len(found) == 5, found
    assert breaches("effects/effects.py", "self._door = pool\nself._pool.handle(change, at)\n") == []
