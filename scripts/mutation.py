"""Mutation testing of the pure cores and the decoders of Nomad's JSON (docs/mutation.md).

Runs mutmut on one core (``--max-children 1``) as ``[tool.mutmut]`` in pyproject.toml sets it: the
modules of ``supervisor/core/``, ``supervisor/nomad/boundary.py`` and the decoders, against their
unit tests. Then prints the score per module, per part and in all, and every surviving mutant with
its line and change, marked ``judged`` when docs/mutation.md names it (an equivalent mutant, with
its reason there).

    python scripts/mutation.py            # a full run from scratch (mutants/ is made anew)
    python scripts/mutation.py --again    # runs again only the mutants that were not killed
    python scripts/mutation.py --report   # runs nothing, reads the last results
    python scripts/mutation.py --again --only supervisor/core/   # those of one part or module
    python scripts/mutation.py --again --survivors   # only those that ran and were not killed

The score is killed / (killed + survived). A mutant that times out counts as killed (the tests
noticed it: it loops); one that no test reaches counts as survived. Exits 0 only if the score of
``core/`` is at least the target and every mutant of ``core/`` was run.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from attrs import frozen

ROOT: Final = Path(__file__).resolve().parents[1]
MUTANTS: Final = ROOT / "mutants"
DOC: Final = ROOT / "docs" / "mutation.md"
LOG_NAME: Final = "mutmut.log"
TARGET: Final = 0.90
# The part of the package each module is scored in, by path prefix; the first that matches.
PARTS: Final = (
    ("core/", "supervisor/core/"),
    ("boundary", "supervisor/nomad/boundary.py"),
    ("decoders", "supervisor/nomad/"),
)
# mutmut's exit codes of a mutant's test run, as its ``status_by_exit_code`` reads them.
KILLED: Final = frozenset({1, 3})
TIMEOUT: Final = frozenset({24, -24, 36, 152, 255})
SURVIVED: Final = frozenset({0})
NO_TESTS: Final = frozenset({5, 33})
NOT_RUN: Final = frozenset({None})


@frozen
class Mutant:
    """One mutant's result, as mutmut left it in ``mutants/<module>.meta``."""

    module: str  # the source file, relative to the checkout
    name: str  # mutmut's key: ``supervisor.core.pool.xǁRunnerPoolǁhandle__mutmut_14``
    exit_code: int | None

    @property
    def verdict(self) -> str:
        if self.exit_code in KILLED:
            return "killed"
        if self.exit_code in TIMEOUT:
            return "timeout"
        if self.exit_code in SURVIVED:
            return "survived"
        if self.exit_code in NO_TESTS:
            return "no tests"
        if self.exit_code in NOT_RUN:
            return "not run"
        return f"other ({self.exit_code})"


@frozen
class Score:
    """Killed and surviving mutants of a module or a part, and those that gave no verdict."""

    killed: int
    survived: int
    unsettled: int

    @property
    def ratio(self) -> float:
        tried = self.killed + self.survived
        return self.killed / tried if tried else 1.0

    @classmethod
    def of(cls, mutants: Iterable[Mutant]) -> Score:
        verdicts = Counter(mutant.verdict for mutant in mutants)
        killed = verdicts["killed"] + verdicts["timeout"]
        survived = verdicts["survived"] + verdicts["no tests"]
        return cls(killed, survived, sum(verdicts.values()) - killed - survived)

    def line(self, label: str) -> str:
        text = f"{label:<44} {self.ratio:7.1%}  {self.killed:5} killed {self.survived:4} survived"
        return text + (f" {self.unsettled:4} without a verdict" if self.unsettled else "")


def part_of(module: str) -> str:
    return next(part for part, prefix in PARTS if module.startswith(prefix))


def read_results() -> list[Mutant]:
    mutants: list[Mutant] = []
    for meta in sorted((MUTANTS / "supervisor").rglob("*.py.meta")):
        module = meta.relative_to(MUTANTS).as_posix().removesuffix(".meta")
        exit_codes = json.loads(meta.read_text())["exit_code_by_key"]
        mutants.extend(Mutant(module, name, code) for name, code in sorted(exit_codes.items()))
    return mutants


def run_mutmut(names: Sequence[str]) -> int:
    """mutmut on one core, its whole output in ``mutants/mutmut.log``: all the mutants, or the ones
    named (which mutmut runs again whatever their last result)."""
    command = [_mutmut(), "run", "--max-children", "1", *names]
    MUTANTS.mkdir(exist_ok=True)
    log = MUTANTS / LOG_NAME
    with log.open("w") as output:
        code = subprocess.call(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    print(f"mutmut run: exit {code}, its output in {log.relative_to(ROOT)}")
    return code


def _mutmut() -> str:
    beside = Path(sys.executable).with_name("mutmut")
    found = str(beside) if beside.exists() else shutil.which("mutmut")
    if found is None:
        raise SystemExit("mutmut is not installed: pip install -e '.[dev]'")
    return found


def where(mutant: Mutant) -> tuple[int, str]:
    """The mutated line in the source file and the change, read from mutmut's diff of the function."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    diff = get_diff_for_mutant(mutant.name, path=mutant.module).splitlines()
    removed = [line[1:].strip() for line in diff[2:] if line.startswith("-")]
    added = [line[1:].strip() for line in diff[2:] if line.startswith("+")]
    offset = _first_change(diff[2:])
    change = f"{' / '.join(removed)}  ->  {' / '.join(added) or '(removed)'}"
    return _function_start(mutant) + offset, change


def _first_change(hunks: Sequence[str]) -> int:
    """The first changed line of a unified diff, counted from the top of the old text (0-based)."""
    next_line = 1
    for text in hunks:
        if header := re.match(r"@@ -(\d+)", text):
            next_line = int(header.group(1))
        elif text.startswith(("-", "+")):
            return next_line - 1
        else:
            next_line += 1
    return 0


def _function_start(mutant: Mutant) -> int:
    """The first line (decorators included) of the function that the mutant changes."""
    qualified = mutant.name[len(mutant.module.removesuffix(".py").replace("/", ".")) + 1 :]
    qualified = qualified.rsplit("__mutmut_", 1)[0]
    if qualified.startswith("xǁ"):
        owner, function = qualified[2:].split("ǁ")
    else:
        owner, function = "", qualified.removeprefix("x_")
    body: list[ast.stmt] = ast.parse((ROOT / mutant.module).read_text()).body
    if owner:
        body = next(node.body for node in body if isinstance(node, ast.ClassDef) and node.name == owner)
    node = next(
        node
        for node in body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function
    )
    return min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])


def judged_in_doc(name: str, doc: str) -> bool:
    return re.search(re.escape(name) + r"(?!\d)", doc) is not None


def report(mutants: Sequence[Mutant]) -> bool:
    """Prints the scores and the survivors; True if ``core/`` meets the target."""
    print("\nScore: killed / (killed + survived); timeouts count as killed, mutants no test reaches")
    print("as survived.\n")
    modules = sorted({mutant.module for mutant in mutants})
    for module in modules:
        of_module = [mutant for mutant in mutants if mutant.module == module]
        if of_module:
            print(Score.of(of_module).line(module))
    print()
    for part, _ in PARTS:
        print(Score.of(mutant for mutant in mutants if part_of(mutant.module) == part).line(part))
    print(Score.of(mutants).line("in all"))

    doc = DOC.read_text() if DOC.exists() else ""
    survivors = [mutant for mutant in mutants if mutant.verdict in ("survived", "no tests")]
    settled = ("survived", "no tests", "killed", "timeout")
    unsettled = [mutant for mutant in mutants if mutant.verdict not in settled]
    print(f"\nSurvivors ({len(survivors)}; 'judged' where docs/mutation.md gives the reason):")
    for mutant in survivors:
        line, change = where(mutant)
        mark = "judged" if judged_in_doc(mutant.name, doc) else "      "
        reached = "" if mutant.verdict == "survived" else "  [no test reaches it]"
        print(f"  {mark} {mutant.module}:{line}  {change}{reached}\n         {mutant.name}")
    for mutant in unsettled:
        print(f"  {mutant.verdict}: {mutant.name}")

    core = [mutant for mutant in mutants if part_of(mutant.module) == "core/"]
    score = Score.of(core)
    met = score.ratio >= TARGET and score.unsettled == 0 and bool(core)
    print(f"\ncore/: {score.ratio:.1%} against a target of {TARGET:.0%}: {'met' if met else 'NOT met'}")
    return met


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--again", action="store_true", help="run again only the mutants not killed last time")
    mode.add_argument("--report", action="store_true", help="run nothing, report the last results")
    parser.add_argument("--only", default="", help="with --again: the modules whose path starts so")
    parser.add_argument(
        "--survivors", action="store_true", help="with --again: not the mutants that never ran"
    )
    args = parser.parse_args(argv)

    if args.again:
        names = [
            mutant.name
            for mutant in read_results()
            if mutant.verdict not in ("killed", "timeout", *(("not run",) if args.survivors else ()))
            and mutant.module.startswith(args.only)
        ]
        if names and run_mutmut(names) != 0:
            return 2
    elif not args.report:
        shutil.rmtree(MUTANTS, ignore_errors=True)
        if run_mutmut([]) != 0:
            return 2
    mutants = read_results()
    if not mutants:
        print("no results: run without --report first")
        return 2
    return 0 if report(mutants) else 1


if __name__ == "__main__":
    raise SystemExit(main())
