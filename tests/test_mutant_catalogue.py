"""scripts/mutant_catalogue.py and scripts/mutants.py: every mutant still applies to the code it
mutates and compiles there, and the runner reads the simulation's verdicts as they are printed.

Plain sync tests on copies in ``tmp_path``; the simulation's output is a stand-in script's, so no
seed runs here.
"""

from __future__ import annotations

import importlib.util
import py_compile
import shutil
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import mutant_catalogue
import mutants

ROOT = Path(__file__).resolve().parents[1]


def _run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "run_all_of_the_catalogue", ROOT / "scenarios" / "run_all.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copy_of(mutant: mutant_catalogue.Mutant, into: Path) -> list[Path]:
    paths = sorted({r.path for r in mutant.replacements})
    for relative in paths:
        (into / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / relative, into / relative)
    return [into / relative for relative in paths]


@pytest.mark.parametrize("mutant", mutant_catalogue.MUTANTS, ids=lambda m: m.name)
def test_the_mutant_applies_once_and_compiles(mutant: mutant_catalogue.Mutant, tmp_path: Path) -> None:
    copies = _copy_of(mutant, tmp_path)
    mutant_catalogue.apply(mutant, tmp_path)
    for copy in copies:
        original = (ROOT / copy.relative_to(tmp_path)).read_text()
        assert copy.read_text() != original
        py_compile.compile(str(copy), cfile=str(tmp_path / "compiled.pyc"), doraise=True)
    for replacement in mutant.replacements:
        assert replacement.new in (tmp_path / replacement.path).read_text()


def test_a_patch_whose_text_moved_fails_loudly_and_writes_nothing(tmp_path: Path) -> None:
    mutant = mutant_catalogue.MUTANTS[0]
    (copy,) = _copy_of(mutant, tmp_path)
    moved = copy.read_text().replace(mutant.replacements[0].old, "")
    copy.write_text(moved)
    with pytest.raises(mutant_catalogue.CatalogueDrift, match="0 times"):
        mutant_catalogue.apply(mutant, tmp_path)
    assert copy.read_text() == moved


def test_each_mechanism_is_named_once_and_its_scenario_runs_at_full_size() -> None:
    names = [mutant.name for mutant in mutant_catalogue.MUTANTS]
    assert len(names) == len(set(names))
    full = {name: options["full"] for name, options in _run_all().SCENARIOS.items()}
    for mutant in mutant_catalogue.MUTANTS:
        if mutant.scenario is not None:
            assert list(mutant.arguments) == full[mutant.scenario], mutant.name


def test_mutants_are_chosen_by_name_in_the_catalogues_order() -> None:
    last, first = mutant_catalogue.MUTANTS[-1], mutant_catalogue.MUTANTS[0]
    assert mutant_catalogue.by_name([last.name, first.name]) == [first, last]
    with pytest.raises(KeyError, match="no_such_mechanism"):
        mutant_catalogue.by_name(["no_such_mechanism"])


_FAKE_SIMULATION = """
import sys
seeds = [int(s) for s in sys.argv[sys.argv.index("--seeds") + 1].split(",")]
for seed in seeds:
    if seed in (3, 5):
        print(f"seed {seed:>5}  5 min  claims   10  executions   20  faults  4  FAIL (2)   trace ab  1.0 s")
        print(f"    broke 2 a claimed runner is alive at 12.500 s: r-{seed}")
        print(f"    broke 2 a claimed runner is alive at 13.500 s: r-{seed}")
        print(f"    broke 5 nothing forgotten at 300.000 s: r-{seed}")
        print("    faults: 100.0 all agents restart")
        print(f"    replay: python scenarios/dst.py --seeds {seed} --minutes 5 --trace")
    else:
        print(f"seed {seed:>5}  5 min  claims   10  executions   20  faults  4  PASS       trace ab  1.0 s")
print(f"{len(seeds)} seeds, 2 failed, in 9 s: [3, 5]")
sys.exit(1)
"""


def _fake_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    (copy / "scenarios").mkdir(parents=True)
    (copy / "scenarios" / "dst.py").write_text(textwrap.dedent(_FAKE_SIMULATION))
    return copy


def _simulate(tmp_path: Path, *, first: bool) -> mutants.SimulationVerdict:
    return mutants.run_simulation(
        _fake_copy(tmp_path),
        list(range(1, 8)),
        jobs=1,
        first=first,
        seed_timeout=30,
        log=tmp_path / "dst.log",
        pictures=tmp_path / "pictures",
    )


def test_the_whole_range_counts_every_failing_seed_and_names_the_first_ones_promises(tmp_path: Path) -> None:
    verdict = _simulate(tmp_path, first=False)
    assert (verdict.ran, verdict.failed) == (7, [3, 5])
    assert verdict.broken == ["2 a claimed runner is alive", "5 nothing forgotten"]
    assert verdict.killed
    assert verdict.describe() == "first fails at seed 3; 2 of 7 seeds run fail"
    assert "r-5" in (tmp_path / "dst.log").read_text()


def test_first_stops_at_the_first_failing_seed_with_its_report_kept(tmp_path: Path) -> None:
    verdict = _simulate(tmp_path, first=True)
    assert verdict.failed == [3]
    log = (tmp_path / "dst.log").read_text()
    assert "replay: python scenarios/dst.py --seeds 3" in log
    assert "r-5" not in log


def test_the_traces_say_where_a_mutant_changed_nothing(tmp_path: Path) -> None:
    verdict = _simulate(tmp_path, first=False)
    assert verdict.hashes == {seed: "ab" for seed in range(1, 8)}
    baseline = mutants.SimulationVerdict([1, 2, 3, 9], ran=4, hashes={1: "ab", 2: "cd", 3: "ab", 9: "ab"})
    assert mutants.unchanged(verdict, baseline) == "2 of 3"


def test_a_survivor_is_described_by_the_seeds_it_passed() -> None:
    verdict = mutants.SimulationVerdict(list(range(1, 101)), ran=40)
    assert not verdict.killed
    assert verdict.describe() == "survived 1-40"


def test_the_table_has_a_row_per_mutant() -> None:
    mutant = mutant_catalogue.MUTANTS[0]
    survived = mutants.SimulationVerdict([1, 2], ran=2)
    rows = mutants.table([(mutant, survived, mutants.ScenarioVerdict("ok", 12.0))]).splitlines()
    assert len(rows) == 3
    assert rows[2].startswith(f"| `{mutant.name}` | `supervisor/core/pool.py`:")
    assert "survived 1-2" in rows[2]
    assert "| ok |" in rows[2]
