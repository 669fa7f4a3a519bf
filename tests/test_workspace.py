"""The workspace is a boundary: file commands, run here with /bin/sh as a runner runs them, never
follow a link out of it, whoever made the link and wherever it sits in the path."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from supervisor.base.errors import InvalidRequest
from supervisor.desk.workspace import (
    ESCAPE_EXIT_CODE,
    MISSING_EXIT_CODE,
    delete_and_copy_command,
    list_files_command,
    parse_file_listing,
    read_file_command,
    tar_archive,
    workspace_path,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return tmp_path / "workspace"


def run(argv: Sequence[str], workspace: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=workspace, input=stdin, capture_output=True, timeout=30, check=False)


def read(path: str, workspace: Path) -> bytes:
    """What a download of ``path`` sends: the file's content, after the line with its size."""
    done = run(read_file_command(path), workspace)
    assert done.returncode == 0, done.stderr
    size, newline, content = done.stdout.partition(b"\n")
    assert newline, "the size comes first, on a line of its own"
    assert int(size) == len(content)
    return content


def patch(
    workspace: Path, deletions: Sequence[str] = (), copies: Sequence[tuple[str, bytes | None]] = ()
) -> subprocess.CompletedProcess[bytes]:
    archive = tar_archive(copies, mtime=time.time()) if copies else b""
    return run(delete_and_copy_command(deletions, copies), workspace, archive)


def listing(workspace: Path, path: str = ".", *, recursive: bool = True) -> dict[str, dict[str, object]]:
    done = run(list_files_command(path, recursive=recursive), workspace)
    assert done.returncode == 0, done.stderr
    return {entry["name"]: entry for entry in parse_file_listing(done.stdout, path)}


def untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret\n"


# -- a copy never writes through a link -------------------------------------------------------


def test_a_copy_through_a_link_to_a_directory_outside_replaces_the_link(workspace: Path) -> None:
    (workspace / "x").symlink_to(workspace.parent / "outside")
    done = patch(workspace, copies=[("x/pwned.txt", b"owned\n")])
    assert done.returncode == 0, done.stderr
    untouched(workspace.parent / "outside")
    assert not (workspace / "x").is_symlink()
    assert (workspace / "x" / "pwned.txt").read_text() == "owned\n"


def test_a_copy_onto_a_link_to_a_file_outside_replaces_the_link(workspace: Path) -> None:
    (workspace / "notes.txt").symlink_to(workspace.parent / "outside" / "secret.txt")
    assert patch(workspace, copies=[("notes.txt", b"mine\n")]).returncode == 0
    untouched(workspace.parent / "outside")
    assert not (workspace / "notes.txt").is_symlink()
    assert (workspace / "notes.txt").read_text() == "mine\n"


def test_a_link_with_dotdot_in_its_target_is_replaced_too(workspace: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "up").symlink_to("../../outside")
    assert patch(workspace, copies=[("sub/up/a.txt", b"a")]).returncode == 0
    untouched(workspace.parent / "outside")
    assert (workspace / "sub" / "up" / "a.txt").read_bytes() == b"a"


def test_a_chain_of_links_is_not_followed(workspace: Path) -> None:
    (workspace / "one").symlink_to("two")
    (workspace / "two").symlink_to(workspace.parent / "outside")
    assert patch(workspace, copies=[("one/a.txt", b"a"), ("two", None)]).returncode == 0
    untouched(workspace.parent / "outside")
    assert (workspace / "one" / "a.txt").read_bytes() == b"a"
    assert (workspace / "two").is_dir()
    assert not (workspace / "two").is_symlink()


def test_a_copy_makes_directories_with_the_modes_the_client_expects(workspace: Path) -> None:
    assert patch(workspace, copies=[("data/", None), ("src/lib/util.py", b"X = 1\n")]).returncode == 0
    assert (workspace / "data").stat().st_mode & 0o7777 == 0o1777
    assert (workspace / "src" / "lib" / "util.py").stat().st_mode & 0o777 == 0o744
    assert [p.name for p in workspace.iterdir() if p.name.startswith(".")] == [], "no staging left"


def test_a_file_replaces_an_empty_directory_but_not_a_full_one(workspace: Path) -> None:
    (workspace / "empty").mkdir()
    (workspace / "full").mkdir()
    (workspace / "full" / "keep.txt").write_text("keep")
    assert patch(workspace, copies=[("empty", b"now a file")]).returncode == 0
    assert (workspace / "empty").read_bytes() == b"now a file"
    refused = patch(workspace, copies=[("full", b"x")])
    assert refused.returncode != 0
    assert b"a directory is in the way" in refused.stderr
    assert (workspace / "full" / "keep.txt").read_text() == "keep"


def test_a_link_swapped_in_while_a_copy_runs_never_leads_it_outside(workspace: Path) -> None:
    """A loop keeps replacing ``x`` by a link to the directory outside while copies run: each copy
    either lands inside the workspace or fails with a clear error; nothing is written outside."""
    outside = workspace.parent / "outside"
    swapper = subprocess.Popen(
        ["/bin/sh", "-c", f"while :; do rm -rf x; ln -s {outside} x; done"], cwd=workspace
    )
    try:
        outcomes = set()
        for _ in range(40):
            done = patch(workspace, copies=[("x/deep/pwned.txt", b"owned\n")])
            outcomes.add(done.returncode)
            assert done.returncode in (0, 71, ESCAPE_EXIT_CODE, 72), done.stderr
    finally:
        swapper.kill()
        swapper.wait()
    assert not (outside / "deep").exists()
    untouched(outside)


def test_a_link_that_stays_inside_is_replaced_by_a_copy_but_followed_by_reads(workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.txt").write_text("a")
    (workspace / "alias").symlink_to("src")
    assert read("alias/a.txt", workspace) == b"a"
    assert listing(workspace, "alias")["./alias"]["entryType"] == "l"
    assert set(listing(workspace, "alias/a.txt")) == {"./alias/a.txt"}
    assert patch(workspace, copies=[("alias/b.txt", b"b")]).returncode == 0
    assert not (workspace / "alias").is_symlink()
    assert (workspace / "src" / "a.txt").read_text() == "a", "the link's target is untouched"


# -- a delete removes the link itself ---------------------------------------------------------


def test_a_delete_removes_the_link_never_its_target(workspace: Path) -> None:
    outside = workspace.parent / "outside"
    (workspace / "x").symlink_to(outside)
    (workspace / "f").symlink_to(outside / "secret.txt")
    assert patch(workspace, deletions=["x", "f"]).returncode == 0
    assert list(workspace.iterdir()) == []
    untouched(outside)


def test_a_delete_through_a_link_outside_deletes_nothing(workspace: Path) -> None:
    outside = workspace.parent / "outside"
    (workspace / "x").symlink_to(outside)
    assert patch(workspace, deletions=["x/secret.txt"]).returncode == 0
    untouched(outside)
    assert (workspace / "x").is_symlink()


def test_clearing_the_workspace_leaves_link_targets_alone(workspace: Path) -> None:
    outside = workspace.parent / "outside"
    (workspace / "x").symlink_to(outside)
    (workspace / ".hidden").symlink_to(outside / "secret.txt")
    (workspace / "dir").mkdir()
    (workspace / "dir" / "inner").symlink_to(outside)
    assert patch(workspace, deletions=["."]).returncode == 0
    assert list(workspace.iterdir()) == []
    untouched(outside)


# -- listings and downloads -------------------------------------------------------------------


def test_a_listing_shows_a_link_as_a_link(workspace: Path) -> None:
    (workspace / "x").symlink_to(workspace.parent / "outside")
    (workspace / "a file.txt").write_text("x")
    (workspace / "dir").mkdir()
    entries = listing(workspace)
    assert set(entries) == {"./x", "./a file.txt", "./dir"}, "nothing behind the link is listed"
    assert entries["./x"]["entryType"] == "l"
    assert entries["./x"]["linkTarget"] == str(workspace.parent / "outside")
    assert entries["./a file.txt"]["size"] == 1
    alone = listing(workspace, "x")
    assert set(alone) == {"./x"}
    assert alone["./x"]["entryType"] == "l"


def test_a_listing_through_a_link_outside_is_refused(workspace: Path) -> None:
    (workspace / "x").symlink_to(workspace.parent / "outside")
    done = run(list_files_command("x/sub", recursive=True), workspace)
    assert done.returncode == ESCAPE_EXIT_CODE
    assert run(list_files_command("nope", recursive=True), workspace).returncode == MISSING_EXIT_CODE


def test_listing_a_directory_names_entries_from_the_workspace(workspace: Path) -> None:
    (workspace / "src" / "lib").mkdir(parents=True)
    (workspace / "src" / "lib" / "util.py").write_text("")
    assert set(listing(workspace, "src")) == {"./src/lib", "./src/lib/util.py"}
    assert set(listing(workspace, "src", recursive=False)) == {"./src/lib"}


@pytest.mark.parametrize(
    "link", ["x/secret.txt", "f", "chain", "up/secret.txt"], ids=["dir", "file", "chain", "dotdot"]
)
def test_a_download_through_a_link_outside_is_refused(workspace: Path, link: str) -> None:
    outside = workspace.parent / "outside"
    (workspace / "x").symlink_to(outside)
    (workspace / "f").symlink_to(outside / "secret.txt")
    (workspace / "chain").symlink_to("f")
    (workspace / "sub").mkdir()
    (workspace / "up").symlink_to("sub/../../outside")
    done = run(read_file_command(link), workspace)
    assert done.returncode == ESCAPE_EXIT_CODE, done.stderr
    assert done.stdout == b""


def test_a_download_through_links_that_stay_inside_works(workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.txt").write_text("a")
    (workspace / "f").symlink_to("src/a.txt")
    (workspace / "g").symlink_to("f")
    assert read("g", workspace) == b"a"
    assert run(read_file_command("nope"), workspace).returncode == MISSING_EXIT_CODE


def test_names_a_shell_would_read_as_options_or_patterns_are_literal(workspace: Path) -> None:
    names = ["-rf", "*", "a b", "$(touch pwned)", "new\nline"]
    assert patch(workspace, copies=[(name, name.encode()) for name in names]).returncode == 0
    assert sorted(p.name for p in workspace.iterdir()) == sorted(names)
    for name in names:
        assert read(name, workspace) == name.encode()
    assert patch(workspace, deletions=["*"]).returncode == 0
    assert sorted(p.name for p in workspace.iterdir()) == sorted(set(names) - {"*"})


# -- the request's own paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [("a/b", "a/b"), ("./a/../b", "b"), ("/workspace/x", "x"), ("/workspace", "."), ("", ".")],
)
def test_workspace_paths(path: str, expected: str) -> None:
    assert workspace_path(path, "/workspace") == expected


@pytest.mark.parametrize("path", ["..", "../x", "a/../../x", "/etc/passwd", "/workspacex/y", "a\0b"])
def test_paths_that_escape_are_refused(path: str) -> None:
    with pytest.raises(InvalidRequest):
        workspace_path(path, "/workspace")


# -- what a review found ----------------------------------------------------------------------


def test_a_staging_directory_that_is_not_ours_is_refused(workspace: Path, tmp_path: Path) -> None:
    """mktemp answers with a link to a directory outside, as if the student had swapped it in: the
    copy refuses, and nothing outside changes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    outside = workspace.parent / "outside"
    (bin_dir / "mktemp").write_text(f'#!/bin/sh\nln -s {outside} "$W/.swapped"; echo "$W/.swapped"\n')
    (bin_dir / "mktemp").chmod(0o755)
    argv = delete_and_copy_command([], [("secret.txt", b"overwritten")])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    archive = tar_archive([("secret.txt", b"overwritten")], mtime=time.time())
    script = argv[2].replace("W=$(pwd -P) || exit 70;", "W=$(pwd -P) || exit 70; export W;", 1)
    done = subprocess.run(
        ["/bin/sh", "-c", script], cwd=workspace, input=archive, capture_output=True, env=env, check=False
    )
    assert done.returncode == 71, done.stderr
    untouched(outside)


def test_a_component_named_dash_is_a_name_not_the_previous_directory(workspace: Path) -> None:
    assert patch(workspace, copies=[("a/-/f.txt", b"f")]).returncode == 0
    assert (workspace / "a" / "-" / "f.txt").read_bytes() == b"f"
    assert not (workspace / "f.txt").exists()
    assert read("a/-/f.txt", workspace) == b"f"
    assert set(listing(workspace, "a/-")) == {"./a/-/f.txt"}
    assert patch(workspace, deletions=["a/-/f.txt"]).returncode == 0
    assert not (workspace / "a" / "-" / "f.txt").exists()


def test_a_download_of_a_fifo_never_waits_for_a_writer(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    (workspace / "file").write_text("data")
    assert run(read_file_command("pipe"), workspace).returncode == MISSING_EXIT_CODE
    swapper = subprocess.Popen(
        ["/bin/sh", "-c", "while :; do echo data > g; mv -f g f; mkfifo h; mv -f h f; done"], cwd=workspace
    )
    try:
        for _ in range(200):  # each reads the file, finds nothing, or fails: none waits
            subprocess.run(read_file_command("f"), cwd=workspace, capture_output=True, timeout=5, check=False)
    finally:
        swapper.kill()
        swapper.wait()


def test_a_link_target_ending_in_a_newline_is_that_file(workspace: Path) -> None:
    (workspace / "a").write_text("a")
    (workspace / "a\n").write_text("a and newline")
    (workspace / "link").symlink_to("a\n")
    assert read("link", workspace) == b"a and newline"


def test_a_name_with_a_tab_is_listed_whole(workspace: Path) -> None:
    (workspace / "a\tb").write_text("x")
    assert set(listing(workspace)) == {"./a\tb"}


def test_clearing_a_workspace_of_many_long_names_works(workspace: Path) -> None:
    """More names than one command line takes (Linux: 2 MiB of arguments)."""
    for i in range(9000):
        (workspace / f"{i:05d}{'x' * 240}").touch()
    done = patch(workspace, deletions=["."])
    assert done.returncode == 0, done.stderr[:200]
    assert list(workspace.iterdir()) == []
