"""scripts/bench_all.py: the table goes into docs/benchmarks.md only when asked, never into the README."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import bench_all

ROOT = Path(__file__).resolve().parents[1]

TABLE = ["| benchmark | target |", "|---|---|", "| bench_decode | typed / bare parse |"]


def test_by_default_nothing_is_written() -> None:
    args = bench_all.parse_args([])
    assert not args.write_docs
    assert args.chosen == list(bench_all.BENCHMARKS)


def test_the_flag_asks_for_the_docs() -> None:
    args = bench_all.parse_args(["--quick", "--only", "bench_decode,bench_events", "--write-docs"])
    assert args.write_docs
    assert args.quick
    assert args.chosen == ["bench_decode", "bench_events"]


def test_an_unknown_benchmark_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench_all.parse_args(["--only", "bench_nothing"])
    assert exit_info.value.code == 2
    assert "bench_nothing" in capsys.readouterr().err


def test_the_docs_are_the_target_and_the_readme_is_not() -> None:
    assert bench_all.DOCS == ROOT / "docs" / "benchmarks.md"
    assert not hasattr(bench_all, "README")
    docs = bench_all.DOCS.read_text()
    assert docs.count(bench_all.BEGIN) == 1
    assert docs.count(bench_all.END) == 1
    assert bench_all.BEGIN not in (ROOT / "README.md").read_text()


def test_the_table_replaces_only_what_stands_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    before = f"# Benchmarks\n\nintro\n\n{bench_all.BEGIN}\nold table\n{bench_all.END}\n\nafter\n"
    page.write_text(before)
    bench_all.write_docs(TABLE, "python scripts/bench_all.py --quick", 120.0, path=page)
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nintro\n\n" + bench_all.BEGIN + "\n")
    assert text.endswith(bench_all.END + "\n\nafter\n")
    assert "old table" not in text
    assert "`python scripts/bench_all.py --quick` on " in text
    assert " cores, 2 min:" in text
    assert "\n".join(TABLE) in text


def test_a_page_without_markers_is_left_alone(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("no markers here\n")
    with pytest.raises(SystemExit):
        bench_all.write_docs(TABLE, "python scripts/bench_all.py", 60.0, path=page)
    assert page.read_text() == "no markers here\n"
