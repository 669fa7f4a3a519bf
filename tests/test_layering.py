"""The package is a dependency graph: lower modules never import higher ones, and its folders are
floors, each importing only from the floors below it (and within itself, without a cycle).

Every import counts, at the top of a module, inside a function (a lazy import), or under
``TYPE_CHECKING``: a cycle hidden in any of them is a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "supervisor"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                candidates = [target, *(f"{target}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {c for c in candidates if c in modules and c != name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle, or [] if there is none."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_no_module_imports_one_above_it() -> None:
    graph = imports()
    assert "supervisor.simulator" in graph["supervisor.tree.daemon"], "an import inside a function counts"
    assert cycle(graph) == [], " -> ".join(cycle(graph))


def test_the_check_sees_a_cycle_where_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert cycle(graph) == ["a", "b", "c", "a"]


# The floors, lowest first: the ground (and the package's root, which holds only its version), the
# Nomad client and the simulated cluster, the decisions, then the parts of the tree from the effects
# up to the daemon, and the command line on top.
FLOORS = [
    "base",
    "nomad",
    "simulator",
    "core",
    "effects",
    "informer",
    "desk",
    "ops",
    "api",
    "tree",
    "dst",
    "top",
]


def floor(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return 0  # supervisor/__init__.py: the version
    name = parts[1] if len(parts) > 2 or parts[1] in FLOORS else "top"
    return FLOORS.index(name)


def test_each_floor_imports_only_from_the_floors_below() -> None:
    graph = imports()
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if floor(target) > floor(module)
    )
    assert upward == []


def test_every_module_stands_on_a_floor() -> None:
    graph = imports()
    top = sorted(m for m in graph if floor(m) == FLOORS.index("top"))
    assert top == ["supervisor.__main__", "supervisor.cli"], "a module outside the floors' folders"


# The simulated cluster's own floors, lowest first: the HTTP server and Nomad's wire rules, the
# jobspec's reader, the state and its events, the scheduler, ACLs and Variables, the agents, the
# fault-injection API, and Nomad's routes on top. Its shared core stays at its top (the settings,
# what the handlers see of the cluster, and the running cluster): the core may import any floor and
# any floor the core, and the cycle check above keeps that honest.
SIMULATOR = "supervisor.simulator"
SIMULATOR_FLOORS = ["http", "jobspec", "state", "scheduling", "acl", "agents", "control", "api"]
SIMULATOR_CORE = [SIMULATOR, f"{SIMULATOR}.cluster", f"{SIMULATOR}.config", f"{SIMULATOR}.handle"]


def simulator_floor(module: str) -> int | None:
    """The module's floor in the simulated cluster, or None for its core and what lies outside it."""
    parts = module.split(".")
    if module in SIMULATOR_CORE or parts[:2] != SIMULATOR.split("."):
        return None
    return SIMULATOR_FLOORS.index(parts[2])


def test_each_simulator_floor_imports_only_from_the_floors_below() -> None:
    graph = imports()
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if (low := simulator_floor(module)) is not None
        for target in targets
        if (high := simulator_floor(target)) is not None and high > low
    )
    assert upward == []


def test_every_simulator_module_stands_on_a_floor_or_in_the_core() -> None:
    graph = imports()
    core = sorted(m for m in graph if m.startswith(SIMULATOR) and simulator_floor(m) is None)
    assert core == SIMULATOR_CORE
