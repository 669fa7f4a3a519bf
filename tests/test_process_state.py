"""No process-wide state: two daemons in one process (an active and a standby, or a test) share
nothing but constants. Every module-level container is a ``Final`` constant, and no function
rebinds a module's name (``global``). ``tests/daemon/test_ha.py`` runs two daemons in one trio run.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

PACKAGE: Final = Path(__file__).resolve().parents[1] / "supervisor"
_CONTAINERS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
_CONSTRUCTORS = frozenset(
    {"dict", "list", "set", "deque", "Counter", "defaultdict", "WeakSet", "WeakValueDictionary"}
)


def _is_container(value: ast.expr | None) -> bool:
    if isinstance(value, _CONTAINERS):
        return True
    if isinstance(value, ast.Call):
        name = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
        return name in _CONSTRUCTORS
    return False


def _is_final(annotation: ast.expr) -> bool:
    target = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return (isinstance(target, ast.Name) and target.id == "Final") or (
        isinstance(target, ast.Attribute) and target.attr == "Final"
    )


def module_state(source: str) -> list[str]:
    """Module-level containers that are not Final constants, and ``global`` statements."""
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and _is_container(node.value):
            names = [t.id for t in node.targets if isinstance(t, ast.Name) and t.id != "__all__"]
            found += [f"{name} (line {node.lineno})" for name in names]
        elif isinstance(node, ast.AnnAssign) and _is_container(node.value) and not _is_final(node.annotation):
            found.append(f"{ast.unparse(node.target)} (line {node.lineno})")
    found += [
        f"global {', '.join(n.names)} (line {n.lineno})" for n in ast.walk(tree) if isinstance(n, ast.Global)
    ]
    return found


# Set once, when the package is imported, to the same function in every daemon: a late-bound import
# (the models sit below the decoder that fills their raw parts), not state that daemons could share.
_IMPORT_TIME: Final = {"nomad/models.py": ["global _decoder (line 73)"]}


def test_no_module_of_the_package_holds_state_of_its_own() -> None:
    state = {
        path.relative_to(PACKAGE).as_posix(): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (found := module_state(path.read_text()))
    }
    assert state == _IMPORT_TIME


def test_the_check_sees_module_state_where_there_is_some() -> None:
    source = (
        "from typing import Final\nimport weakref\n"
        "TABLE: Final = {'a': 1}\n__all__ = ['x']\n"
        "_UNDER_WAY: weakref.WeakSet[int] = weakref.WeakSet()\n_waiting = []\n"
        "def f():\n    global _count\n"
    )
    assert module_state(source) == ["_UNDER_WAY (line 5)", "_waiting (line 6)", "global _count (line 8)"]
