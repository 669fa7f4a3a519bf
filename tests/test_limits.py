"""The project's size limits: a README a reader gets through (500 lines), modules of one concept
(600 lines each, in the package, the scripts, the scenarios and the tests), and documents whose
sections each have a heading of their own, so that every link to one lands where it means to.

Plain sync tests that read files; each failure names the file and its figure.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]
README_LINES: Final = 500
MODULE_LINES: Final = 600
MODULE_FOLDERS: Final = ("supervisor", "scripts", "scenarios", "tests")
_FENCE: Final = re.compile(r"^(```|~~~)")
_HEADING: Final = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")


def _modules() -> list[str]:
    return sorted(
        path.relative_to(ROOT).as_posix()
        for folder in MODULE_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
    )


def _documents() -> list[str]:
    return ["README.md", *sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md"))]


def _line_count(relative: str) -> int:
    return len((ROOT / relative).read_text().splitlines())


def _headings(text: str) -> list[tuple[int, str]]:
    """Each section heading with its line number, outside fenced code blocks (a shell comment or a
    TOML comment there is no heading)."""
    found: list[tuple[int, str]] = []
    fence = ""  # the marker of the code block the line is in
    for number, line in enumerate(text.splitlines(), start=1):
        if marker := _FENCE.match(line):
            if not fence:
                fence = marker.group(1)
            elif marker.group(1) == fence:
                fence = ""
        elif not fence and (heading := _HEADING.match(line)):
            found.append((number, heading.group(1)))
    return found


def test_the_readme_is_at_most_500_lines() -> None:
    lines = _line_count("README.md")
    assert lines <= README_LINES, f"README.md: {lines} lines, over {README_LINES}"


@pytest.mark.parametrize("module", _modules())
def test_no_module_is_over_600_lines(module: str) -> None:
    lines = _line_count(module)
    assert lines <= MODULE_LINES, f"{module}: {lines} lines, over {MODULE_LINES}"


@pytest.mark.parametrize("document", _documents())
def test_no_section_heading_is_repeated_within_a_document(document: str) -> None:
    """Two sections with one heading get one anchor between them on GitHub (the second becomes
    ``-1``), and a reader cannot tell which one a link means."""
    lines_by_heading: defaultdict[str, list[int]] = defaultdict(list)
    spelt: dict[str, str] = {}
    for number, heading in _headings((ROOT / document).read_text()):
        lines_by_heading[heading.casefold()].append(number)
        spelt.setdefault(heading.casefold(), heading)
    repeated = [
        f"{document}: heading {spelt[key]!r} {len(lines)} times (lines {', '.join(map(str, lines))})"
        for key, lines in lines_by_heading.items()
        if len(lines) > 1
    ]
    assert repeated == [], "; ".join(repeated)


def test_the_heading_reader_skips_code_blocks() -> None:
    text = "# Title\n\n```sh\n# a comment\n~~~\n# still code\n```\n\n## Part\n\n~~~toml\n# Title\n~~~\n"
    assert _headings(text) == [(1, "Title"), (9, "Part")]
