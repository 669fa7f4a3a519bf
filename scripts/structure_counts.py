"""The package's structure in figures, read from its source (nothing is run):

- the pool's doors: the pool's mutating methods that modules outside ``core/`` call, and how often;
- the execution's walk: the functions from the WebSocket route to the socket that reaches the
  runner's agent (``Network.connect``), as written below and checked against the source (each
  function calls the next, by name, or hands it to a nursery);
- calls from ``desk/executions.py`` up into the desk (``RunnerDesk`` and what it hands in);
- constructors with more than six arguments, outside the simulated cluster;
- reach-throughs: attribute chains three deep after ``self`` (``self.a.b.c``), in the package and
  in the simulator.

    python scripts/structure_counts.py [--root DIR]

``--root`` reads another checkout (an older commit, to compare).
"""

from __future__ import annotations

import argparse
import ast
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Final, cast

# The execution's walk, by module and qualified name; the one that holds in the source is counted.
WALKS: Final = {
    "with the lease": (
        "api/app.py:_Routes.websocket",
        "desk/executions.py:ExecutionService.serve",
        "desk/executions.py:ExecutionService._execution",
        "desk/executions.py:ExecutionService._bridge",
        "desk/executions.py:ExecutionService._attempt",
        "desk/executions.py:ExecutionService._session",
        "nomad/client.py:NomadClient.open_exec",
        "nomad/exec.py:open_exec",
        "base/network.py:TcpNetwork.connect",
    ),
    "through RunnerDesk.execute": (
        "api/app.py:_Routes.websocket",
        "desk/desk.py:RunnerDesk.execute",
        "desk/executions.py:ExecutionService.serve",
        "desk/executions.py:ExecutionService.serve.execution",
        "desk/executions.py:ExecutionService._run",
        "desk/executions.py:ExecutionService._bridge",
        "desk/executions.py:ExecutionService._attempts",
        "desk/executions.py:ExecutionService._attempt",
        "nomad/client.py:NomadClient.open_exec",
        "nomad/exec.py:open_exec",
        "base/network.py:TcpNetwork.connect",
    ),
}
ARGUMENT_LIMIT: Final = 6


def _modules(package: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(package.rglob("*.py")):
        yield path.relative_to(package).as_posix(), ast.parse(path.read_text())


def _source(node: ast.AST) -> str:
    return ast.unparse(node)


def _public_methods(path: Path, class_name: str) -> set[str]:
    if not path.exists():
        return set()
    return {
        item.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == class_name
        for item in node.body
        if isinstance(item, ast.FunctionDef) and not item.name.startswith("_")
    }


def pool_mutators(package: Path) -> set[str]:
    """The pool's public methods that its view does not have: what changes it."""
    core = package / "core"
    changing = _public_methods(core / "pool.py", "RunnerPool") | _public_methods(
        core / "listing.py", "ListingReconcile"
    )
    return changing - _public_methods(core / "pool_view.py", "PoolView")


def pool_doors(package: Path) -> dict[str, int]:
    """Calls of the pool's mutating methods on something named a pool, outside ``core/``."""
    mutators = pool_mutators(package)
    doors: dict[str, int] = {}
    for name, tree in _modules(package):
        if name.startswith(("core/", "simulator/", "dst/")):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                method = node.func.attr
                if method in mutators and "pool" in _source(node.func.value).lower():
                    doors[method] = doors.get(method, 0) + 1
    return doors


def _functions(package: Path) -> dict[str, tuple[str, ast.AST]]:
    """Every function by ``module:qualified.name``."""
    found: dict[str, tuple[str, ast.AST]] = {}

    def visit(module: str, node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qualified = f"{prefix}{child.name}"
                found[f"{module}:{qualified}"] = (child.name, child)
                visit(module, child, f"{qualified}.")
            elif isinstance(child, ast.ClassDef):
                visit(module, child, f"{prefix}{child.name}.")

    for module, tree in _modules(package):
        if not module.startswith(("simulator/", "dst/")):
            visit(module, tree, "")
    return found


def execution_walk(package: Path) -> tuple[str, tuple[str, ...]] | None:
    """The walk of ``WALKS`` that holds in the source: each function calls the next by name (or
    hands it on as an argument, to a nursery), and a nested one runs as part of its parent."""
    functions = _functions(package)
    for label, walk in WALKS.items():
        if all(step in functions for step in walk) and all(
            _calls(functions[here][1], functions[there][0]) for here, there in itertools.pairwise(walk)
        ):
            return label, walk
    return None


def _calls(function: ast.AST, name: str) -> bool:
    for inner in ast.walk(function):
        nested = inner is not function and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef)
        if nested and getattr(inner, "name", "") == name:
            return True
        if isinstance(inner, ast.Call):
            for target in (inner.func, *inner.args):
                if (isinstance(target, ast.Attribute) and target.attr == name) or (
                    isinstance(target, ast.Name) and target.id == name
                ):
                    return True
    return False


def calls_up_into_the_desk(package: Path) -> int:
    """Calls in ``desk/executions.py`` on what the desk handed in as itself (``runners``)."""
    tree = ast.parse((package / "desk" / "executions.py").read_text())
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and (_source(node.value).endswith("runners") or _source(node.value).endswith("desk"))
    )


def wide_constructors(package: Path) -> dict[str, int]:
    """Constructors taking more than ``ARGUMENT_LIMIT`` arguments, outside the simulator."""
    wide: dict[str, int] = {}
    for module, tree in _modules(package):
        if module.startswith("simulator/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        arguments = item.args
                        count = (
                            len(arguments.posonlyargs) + len(arguments.args) - 1 + len(arguments.kwonlyargs)
                        )
                        if count > ARGUMENT_LIMIT:
                            wide[f"{module}:{node.name}"] = count
    return wide


def reach_throughs(package: Path) -> tuple[int, int]:
    """Chains ``self.a.b.c`` (three attributes or more after ``self``): in all, and in the simulator."""
    total = simulated = 0
    for module, tree in _modules(package):
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and not isinstance(parents.get(node), ast.Attribute):
                depth, value = 0, cast(ast.expr, node)
                while isinstance(value, ast.Attribute):
                    depth, value = depth + 1, value.value
                if isinstance(value, ast.Name) and value.id == "self" and depth >= 3:
                    total += 1
                    simulated += module.startswith("simulator/")
    return total, simulated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    package = parser.parse_args().root / "supervisor"
    doors = pool_doors(package)
    print(
        f"pool doors from outside core/: {len(doors)}",
        f"({', '.join(f'{k} {v}' for k, v in sorted(doors.items()))})",
    )
    found = execution_walk(package)
    if found is None:
        print("execution walk: none of the walks written here holds in this source")
    else:
        label, walk = found
        print(f"execution walk ({label}): {len(walk)} functions")
        for step in walk:
            print(f"  {step}")
    print(f"calls up into the desk from desk/executions.py: {calls_up_into_the_desk(package)}")
    wide = wide_constructors(package)
    print(
        f"constructors over {ARGUMENT_LIMIT} arguments: {len(wide)}",
        *(f"{k} {v}" for k, v in sorted(wide.items())),
    )
    total, simulated = reach_throughs(package)
    print(f"reach-throughs (self.a.b.c): {total} in the package, {simulated} in the simulator")


if __name__ == "__main__":
    main()
